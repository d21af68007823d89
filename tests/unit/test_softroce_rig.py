"""The Soft-RoCE rig's own logic, without booting anything: fault options, names, addresses, the plan."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cluster"))
import softroce  # noqa: E402


@pytest.mark.parametrize("kind, text, qdisc", [
    ("throttle", "node3:0:20mbit", ["tbf", "rate", "20mbit", "burst", "32kbit", "latency", "400ms"]),
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
