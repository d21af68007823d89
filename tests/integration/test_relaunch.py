"""A lost node is left behind, not the run (issue 42), with real mpiexec and real ranks: node3's rank dies
(SIGKILL) or stops (SIGSTOP: a hung node) in round 2 of a pairwise schedule on 6 virtual nodes. The run
names node3 as lost and drains it, keeps the rounds that ended, launches the rest again on the 5 others in
the same run folder, and measures every pair of them exactly once."""
import json
import re
from collections import Counter
from itertools import permutations
from pathlib import Path

import pytest

from test_openmpi import STACKS, needs_open_mpi

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "mpi_suites" / "suite_lost_round.py"
NODES = [f"node{k}" for k in range(1, 7)]
TEST = "tests/mpi_suites/suite_lost_round.py::"


def _run(acceptance_cli, env, *extra):
    p = acceptance_cli("run", "--no-report", "--nodes", "6", "--ranks-per-node", "1", *extra, "--suites", str(SUITE),
                       "--", f"--confcutdir={SUITE.parent}", env=env)
    folder = Path(re.search(r"^run folder: (\S+)$", p.stdout, re.M).group(1))
    return p, folder, json.loads((folder / "run.json").read_text())


def _left_behind(p, folder, run, how):
    assert p.returncode == 1, p.stdout + p.stderr
    assert "acceptance: node3 lost: launching what is left again on 5 nodes (launch 2 of 2)" in p.stdout
    first, second = run["attempts"]
    assert [e["node"] for e in first["left_behind"]] == ["node3"] and how in first["left_behind"][0]["why"]
    assert first["nodes"] == NODES and second["nodes"] == [n for n in NODES if n != "node3"]
    assert (second["exit_code"], second["left_behind"], run["complete"]) == (0, [], True)
    assert [(f["node"], f["kind"]) for f in json.loads((folder / "findings.json").read_text())
            if f["severity"] == "fail"] == [("node3", "lost")]
    assert 'NodeName=node3 State=DRAIN Reason="acceptance: lost: ' in (folder / "drain.txt").read_text()
    recs = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines()]
    # The test before ran once, on all 6; the one after on the 5 left; none failed.
    assert Counter(r["test"] for r in recs if "rounds" not in r["test"]) == {TEST + "test_before": 6,
                                                                            TEST + "test_after": 5}
    assert not [r for r in recs if r["metric"] == "test_failed"]
    # Rounds 0 and 1 ended with node3 in them and are kept; from round 2 on, the 5 left: every directed
    # pair of them measured exactly once, node3 only where it was before it was lost.
    pairs = Counter((tuple(r["nodes"]), r["round"]) for r in recs if "rounds" in r["test"])
    assert max(pairs.values()) == 1
    measured = {p for p, _ in pairs}
    survivors = [n for n in NODES if n != "node3"]
    assert set(permutations(survivors, 2)) <= measured
    # node3 only in rounds before its loss: round 1 too where a record of round 2 reached a spill file
    # before the launcher killed the job (proof that round 1 ended on that rail), else it is measured again
    # without node3 (attempts.Cut): which, depends on how fast the launcher reacts.
    assert {0} <= {r for (p, r) in pairs if "node3" in p} <= {0, 1}
    assert (folder / "logs" / "superseded.jsonl").exists() and not (folder / "resume.json").read_text() == ""


@pytest.mark.parametrize("stack", [pytest.param("MPICH"), pytest.param("Open MPI", marks=needs_open_mpi)])
def test_a_killed_node_is_left_behind_and_the_rest_measured(acceptance_cli, stack):
    p, folder, run = _run(acceptance_cli, {**STACKS[stack], "LOSE_MODE": "die"}, "--hang-timeout", "30")
    _left_behind(p, folder, run, "rank 2 on node3 ended first")


def test_a_hung_node_is_left_behind_and_the_rest_measured(acceptance_cli):
    p, folder, run = _run(acceptance_cli, {"LOSE_MODE": "stop"}, "--hang-timeout", "3")
    _left_behind(p, folder, run, "hung: rank 2 on it stopped answering")
    assert run["attempts"][0]["silent_ranks"] == [2]
    assert "rank [2@node3] said nothing (stopped" in run["attempts"][0]["hang"]
    # The hung launch's logs, its stacks among them, are kept apart from the relaunch's.
    assert "stack of every thread" in (folder / "logs" / "launch1" / "rank-1.log").read_text()
    assert (folder / "logs" / "launch1" / "junit.xml").exists() and (folder / "junit.xml").exists()


def test_one_launch_only_when_the_profile_says_so(acceptance_cli, tmp_path):
    once = tmp_path / "once.toml"
    once.write_text('extends = "local"\n[run]\nattempts = 1\n')
    p, folder, run = _run(acceptance_cli, {"LOSE_MODE": "die"}, "--profile", str(once), "--hang-timeout", "30")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "not launching again: 1 of run.attempts = 1 launches made" in p.stderr
    assert "attempts" not in run and run["lost_nodes"] == ["node3"]
