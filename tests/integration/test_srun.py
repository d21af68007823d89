"""The plugin and `acceptance run` under a real Slurm controller and slurmds (srun --mpi=pmi2)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from localslurm import LocalSlurm, unavailable_reason  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = LocalSlurm(tmp_path_factory.mktemp("slurm"), nodes=2, cpus=2)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _env(slurm, **extra):
    env = slurm.env({k: v for k, v in os.environ.items() if not k.startswith(("ACCEPTANCE_", "PMI", "PYTEST_"))})
    env["PYTHONHASHSEED"] = "0"
    env.update(extra)
    return env


def test_pytest_under_srun_uses_slurm_node_names(slurm, tmp_path):
    run = tmp_path / "run"
    p = subprocess.run(["srun", "-N", "2", "--ntasks-per-node=2", "--mpi=pmi2", "--kill-on-bad-exit=1",
                        sys.executable, "-m", "mpi4py", "-m", "pytest", str(ROOT / "suites"), "-m", "preflight",
                        "--run-dir", str(run)],
                       cwd=ROOT, env=_env(slurm), capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("3 passed") == 1
    meta = json.loads((run / "run.json").read_text())
    assert meta["launcher"] == "srun" and meta["complete"] is True
    assert meta["topology"]["nodes"] == {"node1": [0, 1], "node2": [2, 3]}
    assert sorted(meta["software"]) == ["node1", "node2"]


def test_acceptance_run_inside_an_allocation_uses_srun(slurm, tmp_path):
    p = subprocess.run(["salloc", "-N", "2", "--ntasks-per-node=2", str(BIN / "acceptance"), "run", "--", "-m", "preflight"],
                       cwd=tmp_path, env=_env(slurm, ACCEPTANCE_SRUN_MPI="pmi2"),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "srun over Slurm job" in p.stdout
    folder = Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))
    assert json.loads((folder / "run.json").read_text())["topology"]["nodes"] == {"node1": [0, 1], "node2": [2, 3]}


def test_hang_under_srun_ends_with_exit_3(slurm, tmp_path):
    suite = ROOT / "tests" / "mpi_suites" / "suite_hang.py"
    p = subprocess.run(["salloc", "-N", "2", "--ntasks-per-node=2", str(BIN / "acceptance"), "run",
                        "--hang-timeout", "3", "--suites", str(suite), "--", f"--confcutdir={suite.parent}"],
                       cwd=tmp_path, env=_env(slurm, ACCEPTANCE_SRUN_MPI="pmi2", HANG_RANK="3"),
                       capture_output=True, text=True, timeout=180)
    # srun itself reports the killed step (137); the harness's exit code comes from run.json.
    assert p.returncode == 3, p.stdout + p.stderr
    assert "HANG: rank [3@node2] did not reach" in p.stdout + p.stderr
    folder = Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))
    meta = json.loads((folder / "run.json").read_text())
    assert meta["complete"] is False and meta["missing_ranks"] == [3]
    assert "HANG" in (folder / "junit.xml").read_text()


def test_acceptance_sbatch_job(slurm, tmp_path):
    """slurm/acceptance.sbatch submitted from the checkout: the checkout's venv, reports/ under --output."""
    out = tmp_path / "out"
    p = subprocess.run(["sbatch", "--wait", "-N", "2", "--ntasks-per-node=2", "-o", str(tmp_path / "job.out"),
                        str(ROOT / "slurm" / "acceptance.sbatch")],
                       cwd=ROOT, env=_env(slurm, ACCEPTANCE_SRUN_MPI="pmi2", ACCEPTANCE_OUTPUT=str(out),
                                          ACCEPTANCE_MARKERS="preflight or memreg", ACCEPTANCE_PROFILE="local"),
                       capture_output=True, text=True, timeout=300)
    log = (tmp_path / "job.out").read_text()
    assert p.returncode == 0, p.stdout + p.stderr + log
    assert f"checkout {ROOT}, python {ROOT}/.venv/bin/python, profile local" in log
    assert "verdict: PASS" in log
    folder = Path(re.search(r"^run folder: (\S+)$", log, re.M).group(1))
    assert folder.parent == out
    meta = json.loads((folder / "run.json").read_text())
    assert meta["launcher"] == "srun" and meta["complete"] is True
    assert meta["topology"]["nodes"] == {"node1": [0, 1], "node2": [2, 3]}
    assert (folder / "report.html").exists()


def test_sbatch_job_without_a_profile_refuses_to_run(slurm, tmp_path):
    """No ACCEPTANCE_PROFILE: exit 2 before any rank starts, listing the built-ins and auto."""
    p = subprocess.run(["sbatch", "--wait", "-N", "1", "--ntasks-per-node=1", "-o", str(tmp_path / "job.out"),
                        str(ROOT / "slurm" / "acceptance.sbatch")],
                       cwd=ROOT, env=_env(slurm, ACCEPTANCE_SRUN_MPI="pmi2", ACCEPTANCE_OUTPUT=str(tmp_path)),
                       capture_output=True, text=True, timeout=120)
    log = (tmp_path / "job.out").read_text()
    assert p.returncode == 2, p.stdout + p.stderr + log
    assert "acceptance: no profile: set ACCEPTANCE_PROFILE to a built-in (a100-hdr200,emulated," in log, log
    assert "or auto (the built-in matching these nodes' GPUs and RDMA port rate)" in log
    assert not list(tmp_path.glob("2*"))  # no run folder


def test_lost_node_under_srun_is_named(slurm, tmp_path):
    """A node's ranks die mid-run: srun stops the step, the job exits 3 and run.json names the node."""
    suite = ROOT / "tests" / "mpi_suites" / "suite_hang.py"
    p = subprocess.run(["salloc", "-N", "2", "--ntasks-per-node=2", str(BIN / "acceptance"), "run",
                        "--suites", str(suite), "--", f"--confcutdir={suite.parent}"],
                       cwd=tmp_path, env=_env(slurm, ACCEPTANCE_SRUN_MPI="pmi2", HANG_RANK="3", HANG_MODE="die"),
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 3, p.stdout + p.stderr
    folder = Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))
    meta = json.loads((folder / "run.json").read_text())
    assert meta["complete"] is False and meta["lost_nodes"] == ["node2"] and 3 in meta["missing_ranks"]
    assert "lost node node2" in p.stderr
