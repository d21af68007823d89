"""A node lost during the run is named, with why, as a failing finding and a drain line (issue 42): a rank
that died (the launcher's or this machine's word), or a hang of one node's ranks while every other node's
arrived. A hang over several nodes, or on a one-node run, names nobody."""

from acceptance.analysis import lost
from acceptance.analysis.output import drain_lines

TOPOLOGY = {"ranks": [{"rank": r, "node": f"node{r // 2 + 1}"} for r in range(6)]}


def _drains(run):
    return [d.line for d in drain_lines(lost.findings(run), ["node1", "node2", "node3"])]


def test_a_rank_that_died_names_its_node_and_drains_it_with_why():
    run = {"topology": TOPOLOGY, "missing_ranks": [4], "lost_nodes": ["node3"],
           "lost": "srun: rank 4 on node3 ended first (Killed); the launcher then stopped the job"}
    (f,) = lost.findings(run)
    assert (f["severity"], f["scope"], f["node"], f["kind"], f["suite"]) == ("fail", "node", "node3", "lost", "lost")
    assert f["message"].startswith("node3 was lost during the run: srun: rank 4 on node3 ended first")
    (line,) = _drains(run)
    assert "NodeName=node3 " in line and 'Reason="acceptance: lost: srun: rank 4 on node3 ended first' in line


def test_a_hang_of_one_nodes_ranks_is_that_node_lost():
    run = {"topology": TOPOLOGY, "missing_ranks": [2, 3],
           "hang": "HANG: ranks [2@node2, 3@node2] did not reach suites/x.py::t (call) within 120 s\n  ..."}
    (f,) = lost.findings(run)
    assert f["node"] == "node2" and "hung: rank 2-3 on it did not reach the next step" in f["message"]
    assert f["evidence"][1].startswith("HANG: ranks [2@node2, 3@node2]")
    assert len(_drains(run)) == 1


def test_a_hang_over_several_nodes_or_a_run_of_one_node_names_nobody():
    assert lost.findings({"topology": TOPOLOGY, "missing_ranks": [1, 4], "hang": "HANG: ..."}) == []
    one = {"ranks": [{"rank": r, "node": "node1"} for r in range(2)]}
    assert lost.findings({"topology": one, "missing_ranks": [1], "hang": "HANG: ..."}) == []
    assert lost.findings({"topology": TOPOLOGY}) == []  # a complete run


def test_the_topology_s_node_lists_place_the_ranks_too():
    run = {"topology": {"nodes": {"node1": [0, 1], "node2": [2, 3]}, "ranks": 4}, "missing_ranks": [3],
           "hang": "HANG: rank [3@node2] did not reach ..."}
    assert [f["node"] for f in lost.findings(run)] == ["node2"]
