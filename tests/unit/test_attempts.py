"""A lost node is left behind, not the run (issue 42): what a relaunch keeps, what it measures again, on
which nodes, and when it does not launch again."""
import dataclasses
import json

import pytest

from acceptance.analysis import lost
from acceptance.analysis.validate import topology_nodes
from acceptance.cli import attempts, launch
from acceptance.records.results import RunFolder, make_record
from acceptance.rules.profile import Profile, load_profile
from acceptance.runtime.schedule import Pairing, Resume, schedule
from acceptance.runtime.topology import ENV_EXCLUDE, virtual_nodes

NODES = [f"node{k}" for k in range(1, 9)]


def _topology(nodes, per_node=2):
    ranks = [{"rank": i * per_node + r, "node": n, "rail": r} for i, n in enumerate(nodes) for r in range(per_node)]
    return {"nodes": {n: [i * per_node + r for r in range(per_node)] for i, n in enumerate(nodes)}, "ranks": ranks}


def _profile(**run) -> Profile:
    profile = load_profile("local")
    values = {**profile.values, "run": {**profile.values["run"], **run}}
    return dataclasses.replace(profile, values=values)


@pytest.mark.parametrize("pattern", ["all-pairs", "screen:3"])
def test_a_relaunch_walks_the_first_launchs_rounds_from_where_they_stopped_without_the_lost_node(pattern):
    first = Pairing(pattern, seed=7)
    planned = [list(r) for r in first.rounds(NODES, 0)]
    survivors = [n for n in NODES if n != "node3"]
    resumed = Pairing(pattern, seed=7, resume=Resume({0: NODES}, frozenset({"node3"}), {0: 2}))
    numbered = resumed.numbered(survivors, 0)
    assert [r for r, _ in numbered] == list(range(2, len(planned)))
    for r, pairs in numbered:
        named = {frozenset((survivors[a], survivors[b])) for a, b in pairs}
        # the same round, less the lost node's pair; still disjoint, lower index first
        assert named == {frozenset((NODES[a], NODES[b])) for a, b in planned[r]} - {
            frozenset((NODES[a], NODES[b])) for a, b in planned[r] if "node3" in (NODES[a], NODES[b])}
        assert all(a < b for a, b in pairs) and len({x for p in pairs for x in p}) == 2 * len(pairs)
    # Without a resume, the schedule is the plain one over the nodes given.
    assert Pairing(pattern, seed=7).numbered(survivors, 0) == list(enumerate(schedule(7, pattern, 7)))


def _rec(test, rail, rnd, **extra):
    return make_record(test=test, suite="s", metric="probe", value=1, unit="count", nodes=["node1", "node2"],
                       ranks=[0, 2], rail=rail, round=rnd, **extra)


def test_the_cut_keeps_each_rails_ended_rounds_and_sets_aside_the_rest_of_the_test_in_flight():
    records = [_rec("t::a", 0, 0), _rec("t::a", 0, 1), _rec("t::a", 0, 2), _rec("t::a", 1, 0),
               _rec("t::a", 1, None), _rec("t::b", None, None)]
    cut = attempts.Cut()
    assert cut(records) == {2, 3, 4, 5}  # rail 0 round 2 and rail 1 round 0 may not have ended
    assert cut.first == {"t::a": {0: 2, 1: 0}}  # t::b had no round: it runs again whole
    assert cut.tests == {("t::a", 0), ("t::b", 0)}
    with pytest.raises(Exception, match="round"):
        _rec("t::a", 0, -1)


def test_salvage_with_a_cut_keeps_the_ended_rounds_and_sets_the_rest_aside(tmp_path):
    folder = RunFolder.create(tmp_path, "r")
    lines = [_rec("t::a", 0, r) for r in (0, 1, 2)]
    folder.spill(0).write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert folder.salvage(attempts.Cut()) == (2, 1)
    kept = [json.loads(x)["round"] for x in folder.results.read_text().splitlines()]
    aside = [json.loads(x)["round"] for x in (folder.path / "logs" / attempts.SUPERSEDED).read_text().splitlines()]
    assert (kept, aside) == ([0, 1], [2])


def _run(nodes=NODES, **launch_fields):
    return {"topology": _topology(nodes), "start": "t0", "end": "t1", "exit_code": 3, "complete": False,
            **launch_fields}


def test_a_node_lost_in_one_launch_is_left_behind_and_named_after_the_next(tmp_path):
    folder = RunFolder.create(tmp_path, "r")
    folder.write_run(_run(lost_nodes=["node3"], missing_ranks=[4], lost="srun: rank 4 on node3 ended first (Killed)"))
    decision = attempts.decide(folder.read_run(), 1, _profile())
    assert decision.again and decision.lost == ("node3",) and "node3" not in decision.survivors
    assert "launch 2 of 2" in decision.why
    run = attempts.record_launch(folder, 1, "t0", "t1", again=True)
    assert (run["lost_nodes"], run["missing_ranks"], run["lost"], run["complete"]) == ([], [], None, False)
    (entry,) = run["attempts"]
    assert entry["left_behind"] == [{"node": "node3", "why": "srun: rank 4 on node3 ended first (Killed)"}]
    assert entry["rails"]["0"] == NODES and entry["nodes"] == NODES
    # The relaunch's ranks write their own topology; the lost node stays the run's, and named.
    folder.update_run(topology=_topology([n for n in NODES if n != "node3"]), complete=True, exit_code=0)
    run = attempts.record_launch(folder, 2, "t2", "t3", again=False)
    assert [a["attempt"] for a in run["attempts"]] == [1, 2] and run["attempts"][1]["left_behind"] == []
    assert [f["node"] for f in lost.findings(run)] == ["node3"]
    assert "node3" in topology_nodes(run)
    assert attempts.planned_rails(run)[1] == NODES


@pytest.mark.parametrize("case, why", [
    (dict(nodes=NODES[:4], lost=["node3"]), "more than run.lost_max"),     # 1 of 4 > 0.2
    (dict(nodes=NODES, lost=["node3"], attempt=2), "2 of run.attempts = 2"),
    (dict(nodes=NODES, lost=[]), "no single node was lost"),
    (dict(nodes=NODES, lost=["node3"], attempts=1), "1 of run.attempts = 1"),
])
def test_no_relaunch_past_the_profiles_bounds(case, why):
    run = _run(case["nodes"], lost_nodes=case["lost"], lost="x") if case["lost"] else _run(case["nodes"])
    profile = _profile(attempts=case["attempts"]) if "attempts" in case else _profile()
    decision = attempts.decide(run, case.get("attempt", 1), profile)
    assert not decision.again and why in decision.why, decision.why


def test_the_tests_whose_records_landed_are_not_run_again_and_a_failure_record_of_the_test_in_flight_goes(tmp_path):
    folder = RunFolder.create(tmp_path, "r")
    failed = make_record(test="t::a", suite="s", metric="test_failed", value=None, unit="", nodes=["node1"],
                         ranks=[0], verdict="fail")
    folder.append_records([_rec("t::done", 0, None), failed, _rec("t::other_iteration", 0, None, iteration=1)])
    for test, iteration in (("t::done", 0), ("t::skipped_everywhere", 0), ("t::other_iteration", 1)):
        folder.mark_landed(test, iteration)  # rank 0, as it writes a test's records (none for a skip)
    with open(folder.landed_file, "a") as f:
        f.write('{"test": "t::cut sh')  # the line a lost launch did not finish
    assert attempts.landed_tests(folder, 0, set()) == ["t::done", "t::skipped_everywhere"]
    assert attempts.landed_tests(folder, 0, {"t::done"}) == ["t::skipped_everywhere"]
    assert attempts.set_aside_failures(folder, {("t::a", 0)}) == 1
    assert "test_failed" not in folder.results.read_text()
    assert "test_failed" in (folder.path / "logs" / attempts.SUPERSEDED).read_text()


def test_the_launchers_leave_the_lost_nodes_out(monkeypatch):
    cmd, env, what = launch.LAUNCHERS["local"].command(4, 2, ("node3",))
    assert cmd[cmd.index("-n") + 1] == "6" and env[ENV_EXCLUDE] == "node3" and "3 virtual nodes" in what
    assert virtual_nodes(4, env) == ["node1", "node2", "node4"]
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "8")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "2")
    monkeypatch.setattr(launch.shutil, "which", lambda name: "/usr/bin/" + name)
    cmd, _, what = launch.LAUNCHERS["srun"].command(8, 2, ("node3", "node5"))
    assert what.endswith(", without node3, node5")
    assert {"--nodes=6", "--ntasks=12", "--ntasks-per-node=2", "--exclude=node3,node5"} <= set(cmd)
    assert "--no-kill" not in cmd  # it would keep the step alive past a failed node and ignore -K
    with pytest.raises(launch.LaunchError, match="no relaunch"):
        launch.LAUNCHERS["mpirun"].command(8, 2, ("node3",))


def test_the_reports_banner_says_what_the_relaunch_cost():
    from acceptance.report.sections import verdict
    first = {"attempt": 1, "nodes": NODES, "left_behind": [{"node": "node3", "why": "srun: Killed"}]}
    second = {"attempt": 2, "nodes": [n for n in NODES if n != "node3"], "left_behind": []}
    run = {"topology": _topology(second["nodes"]), "attempts": [first, second], "complete": True}
    box = verdict.context_left_behind(run)
    assert box["nodes"] == [{"node": "node3", "why": "srun: Killed"}]
    assert box["cost"].startswith("1 of 8 nodes lost during the run and left behind; what was left was launched "
                                  "again on the other 7 (2 launches in all)")
    assert "INCOMPLETE" in verdict.context_left_behind({**run, "attempts": [], "lost_nodes": ["node3"],
                                                        "complete": False})["cost"]


def test_a_burn_in_pass_relaunches_on_its_own_schedule_and_counts_every_pass_lost(tmp_path):
    folder = RunFolder.create(tmp_path, "r")
    folder.write_run(_run(lost_nodes=["node3"], lost="x"))
    attempts.record_launch(folder, 1, "t0", "t1", again=True, iteration=0)
    seven = [n for n in NODES if n != "node3"]
    folder.update_run(topology=_topology(seven), complete=True, exit_code=0)
    attempts.record_launch(folder, 2, "t1", "t2", again=False, iteration=0)
    # Pass 1 ran on the seven from its start, and lost node5.
    folder.update_run(lost_nodes=["node5"], lost="y", complete=False, exit_code=3)
    decision = attempts.decide(folder.read_run(), 1, _profile(lost_max=0.5), iteration=1)
    assert decision.again and decision.lost == ("node3", "node5") and len(decision.survivors) == 6
    assert not attempts.decide(folder.read_run(), 1, _profile(), iteration=1).again  # 2 of 8 > 0.2
    run = attempts.record_launch(folder, 1, "t3", "t4", again=True, iteration=1)
    assert attempts.planned_rails(run, 1)[0] == seven and attempts.planned_rails(run, 0)[0] == NODES
