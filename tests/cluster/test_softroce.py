"""The harness on real kernel RDMA devices: Soft-RoCE (rdma_rxe) in the QEMU guest of softroce.py.

Each test boots one guest (TCG, ~15 s) with one rxe device per node and rail and runs
`acceptance run` (or pytest) inside it, on the checkout shared read-write. Skipped, with the
reason, where the rig cannot run (not root, QEMU or rdma-core missing).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import softroce

ROOT = Path(__file__).resolve().parents[2]
ACCEPTANCE = ROOT / ".venv" / "bin" / "acceptance"
PYTHON = ROOT / ".venv" / "bin" / "python"
REASON = softroce.unavailable_reason() or (None if ACCEPTANCE.exists() else f"no {ACCEPTANCE}: run `make dev`")
pytestmark = [pytest.mark.softroce, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
RXE_ERRORS = {"completer_retry_err", "retry_exceeded_err", "rcvd_seq_err", "out_of_seq_request",
              "duplicate_request", "send_err"}


@pytest.fixture(scope="module", autouse=True)
def guest_kernel():
    """The guest kernel, fetched once (apt-get download); without it the rig cannot run here."""
    try:
        return softroce.fetch_kernel(log=lambda _msg: None)
    except (softroce.RigError, OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no guest kernel: {exc}")


def rig(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """softroce.py run ARGS..., from the checkout, with its output."""
    p = subprocess.run([sys.executable, str(Path(softroce.__file__)), "run", *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    p.out = p.stdout + p.stderr
    return p


def acceptance(*run_args: str) -> list[str]:
    return [str(ACCEPTANCE), "run", "--profile", "softroce", *run_args]


def folder_of(out: str) -> Path:
    found = re.findall(r"^run folder: (\S+)$", out, re.MULTILINE)
    assert found, out[-3000:]
    return Path(found[-1])


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]


def findings(folder: Path) -> list[dict]:
    data = json.loads((folder / "findings.json").read_text())
    return data if isinstance(data, list) else data.get("findings", [])


def test_healthy_two_nodes_two_rails_on_rxe_devices():
    """The engine's own device tests, then memreg, p2p, perftest, counters and preflight: exit 0,
    every measurement from the rxe devices of the rank's own node and rail."""
    device_tests = (f"{PYTHON} -m pytest -q -rs -p no:cacheprovider tests/unit/test_verbs_device.py; "
                    "echo device-tests-exit=$?; ")
    run = " ".join(acceptance("--nodes", "2", "--ranks-per-node", "2", "--",
                              "-m", "'memreg or p2p or preflight or counters'"))
    p = rig("--nodes", "2", "--rails", "2", "--", "bash", "-c", device_tests + run)
    assert "device-tests-exit=0" in p.out and re.search(r"\b3 passed\b", p.out), p.out[-4000:]
    assert "skipped" not in p.out.split("device-tests-exit")[0], p.out[-4000:]
    assert p.returncode == 0, p.out[-4000:]
    folder = folder_of(p.out)
    recs = records(folder)
    by_suite = Counter(r["suite"] for r in recs)
    for suite in ("rdma_write", "memreg", "perftest", "counters", "preflight"):
        assert by_suite[suite], (suite, by_suite)
    assert {r["engine"] for r in recs if r["suite"] in ("rdma_write", "memreg")} == {"verbs"}
    metrics = {r["metric"] for r in recs if r["suite"] == "rdma_write"}
    assert {"bandwidth", "latency_p50", "read_latency_p50", "atomic_latency_p50"} <= metrics, metrics
    # perftest beside the harness: both directions of the pair on both rails.
    crossed = {(tuple(r["nodes"]), r["rail"]) for r in recs if r["suite"] == "perftest" and r["metric"] == "bandwidth"}
    assert crossed == {(("node1", "node2"), 0), (("node2", "node1"), 0), (("node1", "node2"), 1),
                       (("node2", "node1"), 1)}
    # Counters and preflight read the rxe devices of each node: node n, rail r -> rxe_n<n>r<r>.
    for r in recs:
        if r["suite"] == "counters" or r["metric"] in ("port_rate", "port_mtu"):
            node = r["nodes"][0]
            assert r["detail"].startswith(f"rxe_n{node[-1]}r{r['rail']} port 1"), r
    rates = [r for r in recs if r["metric"] == "port_rate"]
    assert len(rates) == 4 and all(r["verdict"] == "pass" and r["value"] >= 10 for r in rates)
    assert {r["detail"] for r in recs if r["metric"] == "link_layer_mismatches"} == {"every port Ethernet"}
    run_json = json.loads((folder / "run.json").read_text())
    assert run_json["engines"]["rdma_write"]["devices"] == {
        "0@node1": "rxe_n1r0", "1@node1": "rxe_n1r1", "2@node2": "rxe_n2r0", "3@node2": "rxe_n2r1"}
    assert [r["nic"] for r in run_json["topology"]["ranks"]] == ["rxe_n1r0", "rxe_n1r1", "rxe_n2r0", "rxe_n2r1"]
    assert findings(folder) == []


def test_a_throttled_rail_link_is_named_alone():
    """node2's rail-1 link at 20 Mbit/s among 3 nodes: exit 1, and every failing finding is about
    node2 on rail 1 (its NIC: slow with both partners)."""
    p = rig("--nodes", "3", "--rails", "2", "--throttle", "node2:1:20mbit", "--",
            *acceptance("--nodes", "3", "--ranks-per-node", "2", "--", "-m", "p2p", "-k", "write_bandwidth and rail1"))
    assert p.returncode == 1, p.out[-4000:]
    found = [f for f in findings(folder_of(p.out)) if f["severity"] == "fail"]
    assert found, p.out[-4000:]
    assert {(f["node"], f["rail"]) for f in found} == {("node2", 1)}, found
    assert any(f["scope"] == "nic" and f["metric"] == "bandwidth" for f in found), found


def test_packet_loss_raises_a_counter_finding_naming_the_device():
    """1% loss on node2's rail-0 link: rxe retransmits; the port counter window around the suite sees
    it and a NIC finding names rxe_n2r0 and the counter (the peer's rxe_n1r0 retransmits too: both
    ends of a lossy link count). One rank per node measures rail 0; the rail-1 devices, in the same
    counter windows, stay clean."""
    p = rig("--nodes", "2", "--rails", "2", "--loss", "node2:0:1%", "--",
            *acceptance("--nodes", "2", "--ranks-per-node", "1", "--", "-m", "p2p", "-k", "write_bandwidth"))
    assert p.returncode == 1, p.out[-4000:]
    found = [f for f in findings(folder_of(p.out)) if f["severity"] == "fail" and f["metric"] in RXE_ERRORS]
    assert any(f["node"] == "node2" and f["rail"] == 0 and "rxe_n2r0" in f["message"] for f in found), \
        (found, p.out[-3000:])
    assert {f["rail"] for f in found} == {0}, found


def test_the_rig_stops_the_guest_at_its_timeout():
    p = rig("--nodes", "1", "--rails", "1", "--timeout", "25", "--", "sleep", "600", timeout=120)
    assert p.returncode == 124, p.out[-3000:]
    assert "timed out after 25 s" in p.out
    left = subprocess.run(["pgrep", "-f", "qemu-system-x86_64.*softroce"], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout
