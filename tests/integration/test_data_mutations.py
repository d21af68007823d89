"""Mutation tests of the data checks on real MPI ranks.

At the engine boundary: every verified point-to-point operation of the mpi engine (windowed
writes, latency writes, reads, atomics, incast) under each fault of tests/faults.py must give
failed checks at every size, and a faithful transport none. Below the engine: a PMPI interposer
(tests/data/pmpi_drop.c, built here with the venv's mpicc, loaded with LD_PRELOAD) drops every
second MPI_Allreduce, MPI_Alltoall or MPI_Put past an onset, and `acceptance run` on the embedded
default must exit 1 with wrong-data findings at every size; loaded but dropping nothing, it exits 0.
"""

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from acceptance.rules import catalog
from conftest import BIN

DATA = Path(__file__).resolve().parents[1] / "data"


def test_every_fault_of_every_verified_operation_is_caught_on_two_ranks():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ACCEPTANCE_", "PMI", "PYTEST_"))}
    p = subprocess.run([str(BIN / "mpiexec"), "-n", "2", sys.executable, str(DATA / "mutate_pair.py")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    cases = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(cases) == 5 * (4 * 3 + 2), p.stdout  # modes x (4 ops x 3 sizes + atomic + incast)
    for c in cases:
        assert c["ops"] > 0, c
        if c["mode"] == "none":
            assert c["failed"] == 0 and c["wrong"] == 0, c
        else:
            assert c["failed"] > 0 and c["wrong"] > 0, c
            if c["mode"] == "drop" and c["op"] not in ("atomic",):
                assert c["missing"] > 0, c  # the poison untouched: "did not arrive"


@pytest.fixture(scope="module")
def interposer(tmp_path_factory) -> Path:
    lib = tmp_path_factory.mktemp("pmpi") / "pmpi_drop.so"
    p = subprocess.run([str(BIN / "mpicc"), "-shared", "-fPIC", "-O1", "-o", str(lib), str(DATA / "pmpi_drop.c")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot build the PMPI interposer with {BIN / 'mpicc'}: {p.stderr.strip()[-500:]}")
    return lib


# The embedded default with a shorter sweep and latency loop: the same checks at every size, a quarter of
# the CPU beside the rig in `make test` (by hand, the embedded default itself fails and passes alike).
LIGHT = 'extends = "local"\n[sweep]\nmax_size = "256KiB"\nbytes_per_size = "8MiB"\n[latency]\niters = 2000\n'


def _run(acceptance_cli, lib: Path, drop: str | None, marks: str, *pytest_args: str, light: bool = False):
    env = {"LD_PRELOAD": str(lib)}
    if drop:
        env["ACCEPTANCE_TEST_DROP"] = drop
    profile = []
    if light:
        path = lib.parent / "light.toml"
        path.write_text(LIGHT)
        profile = ["--profile", str(path)]
    p = acceptance_cli("run", "--no-report", *profile, "--", "-m", marks, *pytest_args, env=env, timeout=600)
    folder = Path(re.findall(r"^run folder: (\S+)$", p.stdout, re.M)[-1])
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]
    found = json.loads((folder / "findings.json").read_text())
    return p, recs, found if isinstance(found, list) else found.get("findings", [])


@pytest.mark.parametrize("drop, marks, tests, light", [
    ("MPI_Allreduce", "collective", "test_allreduce", False),
    ("MPI_Alltoall", "collective", "test_alltoall", False),
    ("MPI_Put", "p2p or incast", "test_write_bandwidth", True),
    ("MPI_Get", "p2p", "test_read_bandwidth", True),
])
def test_dropping_every_second_operation_fails_every_size(acceptance_cli, interposer, drop, marks, tests, light):
    select = "read_bandwidth" if drop == "MPI_Get" else "not latency and not atomic and not read"
    p, recs, found = _run(acceptance_cli, interposer, drop, marks, "-k", select, light=light)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-2000:]
    assert re.search(r"pmpi_drop: dropped [1-9]\d* of", p.stdout + p.stderr)
    checks = [r for r in recs if r["metric"] in catalog.DATA_ERROR_NAMES and r["test"].split("::")[1].startswith(tests)]
    by_size = defaultdict(list)
    for r in checks:
        by_size[(r["test"], r["size"])].append(r)
    assert len({size for _, size in by_size}) >= 6, sorted(by_size)
    for key, rs in by_size.items():  # every size of every scope: some checked operation did not arrive
        assert any(r["value"] > 0 and r["ops_failed"] > 0 and r["ops_missing"] > 0 for r in rs), (key, rs)
        assert all(r["verdict"] == "fail" for r in rs if r["value"] > 0)
    data = [f for f in found if f["severity"] == "fail" and f["metric"] in catalog.DATA_ERROR_NAMES]
    assert data and all(re.search(r"\d+ of \d+ \w[\w -]* did not arrive", f["message"]) for f in data), found


def test_the_interposer_dropping_nothing_passes(acceptance_cli, interposer):
    p, recs, _ = _run(acceptance_cli, interposer, None, "collective or p2p or incast", light=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    checks = [r for r in recs if r["metric"] in catalog.DATA_ERROR_NAMES]
    assert checks and all(r["value"] == 0 and r["ops"] > 0 and r["ops_failed"] == 0 for r in checks)
