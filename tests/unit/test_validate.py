"""Validation on load: node names a record may carry (acceptance.analysis.validate)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import synthetic

from acceptance.analysis import analyze, load_records
from acceptance.analysis.validate import (
    check_record_nodes,
    first_line_naming,
    is_node_name,
    node_name_problem,
    record_node_names,
    topology_nodes,
)
from acceptance.records.results import InputError, make_record

VALID = ["gpu001", "node-1.rack2", "n_3", "node07", "a", "x" * 255, "GPU-A100_7.example.com"]
INVALID = {"gpu[001-512]": "hostlist syntax '['", "a,b": "hostlist syntax ','", "gpu]": "hostlist syntax ']'",
           "a b": "whitespace ' '", "a\u00a0b": "whitespace", "a=b": "key=value syntax '='", "": "empty",
           'a"b': "quote", "a'b": "quote", "a\\b": "backslash", "a$b": "$", "a`b": "backtick",
           "a\nb": "a control character '\\n'", "a\tb": "a control character", "a\x00b": "a control character",
           "a\x7fb": "a control character", "x" * 256: "longer than 255 characters (256)"}


def record(nodes, metric="ranks", **kw):
    return json.dumps(make_record(test="suites/test_preflight.py::test_ranks", suite="preflight", metric=metric,
                                  value=1, unit="count", nodes=nodes, ranks=[0], **kw)) + "\n"


def results(tmp_path, lines) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "results.jsonl"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("name", VALID)
def test_valid_slurm_node_names(name):
    assert node_name_problem(name) is None and is_node_name(name)


@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_slurm_node_names_say_why(name):
    why = node_name_problem(name)
    assert why is not None and INVALID[name] in why, why
    assert not is_node_name(name)


def test_not_a_string_is_not_a_node_name():
    assert not is_node_name(None) and not is_node_name(7)
    assert "not a string" in node_name_problem(7)


def test_topology_nodes_of_run_json():
    assert topology_nodes({"topology": {"nodes": {"node1": [0, 1], "node2": [2, 3]}}}) == {"node1", "node2"}
    assert topology_nodes({"topology": {"nodes": ["node1", "node2"]}}) == {"node1", "node2"}
    assert topology_nodes({"run_id": "x"}) is None and topology_nodes(None) is None
    assert topology_nodes({"topology": {"rails": [0]}}) is None
    with pytest.raises(InputError, match=r"/x/run.json: topology.nodes must be an object"):
        topology_nodes({"topology": {"nodes": "node1"}}, "/x/run.json")
    with pytest.raises(InputError, match=r"run.json: topology must be an object"):
        topology_nodes({"topology": ["node1"]})


def test_record_node_names_include_every_entry_of_a_long_list(tmp_path):
    path = results(tmp_path, [record(["n1", "n2"]), record(["n3"]), record(["n1", "n2", "n4", "n5"]),
                              record([])])
    assert record_node_names(load_records(path)) == {"n1", "n2", "n3", "n4", "n5"}


def test_a_hostlist_node_name_is_an_input_error_naming_file_and_line(tmp_path):
    path = results(tmp_path, [record(["node01"]), record(["node01", "node02"]), record(["gpu[001-512]"]),
                              record(["gpu[001-512]", "node01"])])
    with pytest.raises(InputError) as e:
        check_record_nodes(load_records(path))
    assert str(e.value) == (f"{path}: line 3: node name 'gpu[001-512]' is not a valid Slurm node name "
                            "(hostlist syntax '[')")


def test_the_first_line_of_any_bad_name_is_named_and_the_others_counted(tmp_path):
    path = results(tmp_path, [record(["node01"]), record(["a b"]), record(["node02", "a,b"]), record(["a=b"])])
    with pytest.raises(InputError, match=r"line 2: node name 'a b' is not a valid Slurm node name \(whitespace "
                                         r"' '\); 2 other invalid node names: 'a,b', 'a=b'$"):
        check_record_nodes(load_records(path))


@pytest.mark.odd_records
def test_a_name_found_only_in_a_third_entry_or_written_with_escapes_is_found(tmp_path):
    lines = [record(["node01", "node02", "node03"]),
             '{"test": "t", "suite": "preflight", "metric": "m", "value": 1, "nodes": ["node01", "n\\u0020x"]}\n']
    path = results(tmp_path, lines)
    with pytest.raises(InputError, match=r"line 2: node name 'n x' is not a valid Slurm node name"):
        check_record_nodes(load_records(path), {"node01", "node02", "node03"})
    path = results(tmp_path / "b", [record(["node01", "node02", "gpu[1-2]"])])
    with pytest.raises(InputError, match=r"line 1: node name 'gpu\[1-2\]'"):
        check_record_nodes(load_records(path))


def test_the_name_must_be_in_nodes_not_merely_on_the_line(tmp_path):
    path = results(tmp_path, [record(["node01"], detail="node9 is odd"), record(["node01"]), record(["node9"])])
    with pytest.raises(InputError, match=r"line 3: node 'node9' is not in the run's topology"):
        check_record_nodes(load_records(path), {"node01"})
    assert first_line_naming(path, {"node9"}) == (3, "node9")
    assert first_line_naming(path, {"nowhere"}) == (None, "nowhere")


@pytest.mark.odd_records
def test_an_empty_node_name_is_found_by_its_line(tmp_path):
    path = results(tmp_path, [record(["node01"], detail=""), record(["", "node01"])])
    with pytest.raises(InputError, match=r"line 2: node name '' is not a valid Slurm node name \(empty\)"):
        check_record_nodes(load_records(path))


@pytest.mark.odd_records
def test_an_empty_second_node_name_is_found_by_its_line(tmp_path):
    path = results(tmp_path, [record(["node01"]), record(["node01", ""])])
    with pytest.raises(InputError, match=r"line 2: node name '' is not a valid Slurm node name \(empty\)"):
        check_record_nodes(load_records(path))


def test_a_node_the_topology_does_not_know_names_the_node_and_run_json(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, collectives=False, memreg=False)
    lines = (run / "results.jsonl").read_text().count("\n")
    with open(run / "results.jsonl", "a") as fh:
        fh.write(record(["node09"]))
    with pytest.raises(InputError) as e:
        analyze(run)
    assert str(e.value) == (f"{run / 'results.jsonl'}: line {lines + 1}: node 'node09' is not in the run's "
                            f"topology ({run / 'run.json'} topology.nodes: 4 nodes, node01, node02, node03, node04)")


def test_without_a_topology_only_the_name_rule_applies(tmp_path):
    path = results(tmp_path, [record(["anything-7"]), record([])])
    check_record_nodes(load_records(path))  # no topology: any valid name
    a = analyze(tmp_path, profile="local")  # no run.json at all
    assert a.findings == [] and a.drains == []
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r", "profile": "local"}))
    assert analyze(tmp_path).drains == []
    results(tmp_path, [record(["gpu[001-512]"])])
    with pytest.raises(InputError, match=r"results.jsonl: line 1: node name 'gpu\[001-512\]'"):
        analyze(tmp_path)


def test_a_baseline_is_checked_against_its_own_topology(tmp_path):
    now = synthetic.make_run(tmp_path / "now", nodes=4, rails=2, latency=False, collectives=False, memreg=False)
    base = synthetic.make_run(tmp_path / "base", nodes=4, rails=2, latency=False, collectives=False, memreg=False)
    with open(base / "results.jsonl", "a") as fh:
        fh.write(record(["node1,node2"]))
    with pytest.raises(InputError, match=rf"{base / 'results.jsonl'}: line \d+: node name 'node1,node2'"):
        analyze(now, baseline_dir=base)


def test_drain_lines_name_only_the_runs_nodes(tmp_path):
    run = synthetic.make_run(tmp_path / "run", nodes=6, rails=2, slow_nic=("node04", 1), latency=False,
                             collectives=False, memreg=False)
    assert [d.node for d in analyze(run).drains] == ["node04"]


def test_an_input_error_after_a_run_exits_2_with_the_message(tmp_path, capsys):
    from acceptance.cli import run as cli_run
    from acceptance.records.results import RunFolder
    run = synthetic.make_run(tmp_path / "run", nodes=4, rails=2, latency=False, collectives=False, memreg=False)
    with open(run / "results.jsonl", "a") as fh:
        fh.write(record(["gpu[001-512]"]))
    assert cli_run.post_run(RunFolder(run), drain=True) == 2
    err = capsys.readouterr().err
    assert f"{run / 'results.jsonl'}: line " in err and "node name 'gpu[001-512]' is not a valid Slurm" in err
    assert "Traceback" not in err and not (run / "drain.txt").exists()
