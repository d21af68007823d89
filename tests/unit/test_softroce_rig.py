"""The Soft-RoCE rig's own logic, without booting anything: fault options, names, addresses, the plan."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import softroce  # noqa: E402


@pytest.mark.parametrize("kind, text, qdisc", [
    ("throttle", "node3:0:20mbit", ["tbf", "rate", "20mbit", "burst", "32kbit", "limit", "600kb"]),
    ("loss", "2:1:1%", ["netem", "loss", "1%"]),
    ("delay", "node1:1:10ms", ["netem", "delay", "10ms"]),
])
def test_faults_parse_into_qdiscs(kind, text, qdisc):
    fault = softroce.parse_fault(kind, text, nodes=3, rails=2)
    assert fault.qdisc() == qdisc and fault.kind == kind


@pytest.mark.parametrize("kind, text, why", [
    ("throttle", "node3:20mbit", "expected NODE:RAIL:VALUE, e.g. node2:1:20mbit"),
    ("throttle", "node4:0:20mbit", "node 4 is not one of node1..node3"),
    ("loss", "node1:2:1%", "rail 2 is not one of 0..1"),
    ("loss", "node1:0:1", "'1' is not a value like 5%"),
    ("delay", "node1:0:fast", "'fast' is not a value like 10ms"),
])
def test_bad_faults_say_what_is_wrong(kind, text, why):
    with pytest.raises(softroce.RigError, match=f"^--{kind} {text!r}: ") as info:
        softroce.parse_fault(kind, text, nodes=3, rails=2)
    assert why in str(info.value)


def test_names_addresses_and_the_device_map():
    assert softroce.device_name(2, 1) == "rxe_n2r1" and softroce.node_link(2, 1) == "n2r1"
    assert softroce.address(2, 1) == "198.18.2.2"
    assert softroce.device_map(2, 2) == {"node1": ["rxe_n1r0", "rxe_n1r1"], "node2": ["rxe_n2r0", "rxe_n2r1"]}


def test_the_plan_travels_as_json(tmp_path):
    plan = softroce.Plan(2, 2, ["true"], "/work", {"UCX_TLS": "self,sm,tcp"},
                         [softroce.parse_fault("loss", "node2:0:1%", 2, 2)], work=str(tmp_path))
    path = tmp_path / "plan.json"
    import dataclasses
    import json
    path.write_text(json.dumps(dataclasses.asdict(plan)))
    assert softroce.Plan.load(str(path)) == plan


def test_run_refuses_a_missing_command(capsys):
    with pytest.raises(SystemExit) as info:
        softroce.main(["run", "--nodes", "2"])
    assert info.value.code == 2 and "run needs a COMMAND after --" in capsys.readouterr().err


def test_uplink_faults_name_a_leaf_of_the_tree():
    fault = softroce.parse_uplink_fault("leaf2:1:20mbit", leaves=2, rails=2)
    assert fault.ends() == ("r1u2", "r1s2") and fault.qdisc()[:3] == ["tbf", "rate", "20mbit"]
    assert str(fault) == "throttle leaf2's uplink on rail 1:20mbit"
    assert softroce.parse_uplink_fault("1:0:5mbit", leaves=2, rails=2).leaf == 1
    for text, why in (("leaf3:0:20mbit", "the tree has leaf1..leaf2"), ("leaf1:2:20mbit", "rail 2 is not one of 0..1"),
                      ("leaf1:0:fast", "'fast' is not a rate"), ("leaf1-0", "expected LEAF:RAIL:RATE")):
        with pytest.raises(softroce.RigError, match=f"^--throttle-uplink {text!r}: ") as info:
            softroce.parse_uplink_fault(text, leaves=2, rails=2)
        assert why in str(info.value)
    with pytest.raises(softroce.RigError, match="no switch tree"):
        softroce.parse_uplink_fault("leaf1:0:20mbit", leaves=0, rails=2)


def test_a_plan_with_leaves_travels_as_json(tmp_path):
    plan = softroce.Plan(6, 2, ["true"], "/work", {}, [softroce.parse_uplink_fault("leaf2:1:20mbit", 2, 2)],
                         work=str(tmp_path), leaves=2)
    import dataclasses
    import json
    (tmp_path / "plan.json").write_text(json.dumps(dataclasses.asdict(plan)))
    assert softroce.Plan.load(str(tmp_path / "plan.json")) == plan
