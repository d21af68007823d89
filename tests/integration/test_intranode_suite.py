"""The intranode suite on real MPI ranks without a GPU: both tests skip on every rank, alike."""
import importlib.util
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("cupy") is not None,
                                reason="cupy is installed here: the no-GPU skip is not what this machine shows")

REASON = "no CUDA device on any node: cupy not importable: No module named 'cupy'"
TESTS = ("test_host_device_bandwidth", "test_gpu_peer_bandwidth")


def test_no_gpu_skips_on_every_rank_with_the_reason(acceptance_cli):
    p = acceptance_cli("run", "--nodes", "2", "--ranks-per-node", "1", "--", "-m", "intranode", "-rs")
    out = p.stdout + p.stderr
    assert p.returncode == 3, out  # every check skipped: nothing measured, never a pass
    assert "2 skipped" in p.stdout and "inconsistent" not in out
    # -rs folds equal skips into one line: both tests, the same reason.
    skipped = rf"SKIPPED \[2\] \S*suites/test_intranode\.py:\d+: {re.escape(REASON)}"
    assert re.search(skipped, p.stdout), out
    folder = Path(re.search(r"^run folder: (\S+)$", p.stdout, re.MULTILINE).group(1))
    junit = (folder / "junit.xml").read_text()
    for test in TESTS:
        case = re.search(rf'<testcase [^>]*name="{test}"[^>]*>(.*?)</testcase>', junit, re.DOTALL)
        assert case and "<skipped" in case.group(1) and "no CUDA device on any node" in case.group(1), junit
    # Rank 1 (node2) decided the same, from the same gathered facts.
    rank1 = (folder / "logs" / "rank-1.log").read_text()
    assert re.search(skipped, rank1) and "2 skipped" in rank1, rank1
    records = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    assert not [r for r in records if r["suite"] == "intranode"]
    run = json.loads((folder / "run.json").read_text())
    assert run["exit_code"] == 3 and run["verdict"] == "incomplete" and run["complete"] is True
    assert run["profile"]["values"]["intranode"]["size"] == 256 * 2**20
