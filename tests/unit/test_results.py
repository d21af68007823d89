"""results: records, the Recorder and the run folder, on a real temporary folder."""
import json
import math
import re
from datetime import datetime
from pathlib import Path

import pytest

from acceptance.records.results import (
    FAILED_METRIC,
    REQUIRED_KEYS,
    Recorder,
    RecordError,
    RunFolder,
    make_record,
    new_run_id,
    utc_now,
)

BASE = dict(test="t::x", suite="rdma_write", metric="bw", unit="GB/s", nodes=["n1"], ranks=[0])


def test_make_record_has_every_required_key():
    rec = make_record(value=1.5, **BASE)
    assert set(REQUIRED_KEYS) <= set(rec)
    assert "detail" not in rec
    assert rec["value"] == 1.5
    assert rec["verdict"] == "info"
    assert rec["memory"] == "host"
    assert rec["iteration"] == 0
    assert rec["samples"] == 1
    assert rec["size"] is None and rec["rail"] is None and rec["threshold"] is None
    assert rec["nodes"] == ["n1"] and rec["ranks"] == [0]
    assert rec["time"].endswith("Z")


def test_make_record_keeps_int_and_copies_lists():
    nodes, ranks = ["n1"], [0]
    rec = make_record(**{**BASE, "nodes": nodes, "ranks": ranks}, value=7)
    assert rec["value"] == 7 and type(rec["value"]) is int
    nodes.append("n2")
    assert rec["nodes"] == ["n1"]


@pytest.mark.parametrize("kwargs", [
    {"verdict": "ok"},
    {"memory": "gpu"},
    {"value": True},
    {"value": "3"},
    {"value": float("nan")},
    {"value": float("inf")},
    {"value": -math.inf},
])
def test_bad_records_raise(kwargs):
    args = {**BASE, "value": 1.0, **kwargs}
    with pytest.raises(RecordError):
        make_record(**args)


def test_record_error_is_value_error():
    assert issubclass(RecordError, ValueError)


def test_none_value_allowed_with_detail():
    rec = make_record(value=None, detail="no rdma device", verdict="warn", **BASE)
    assert rec["value"] is None
    assert rec["detail"] == "no rdma device"
    assert rec["verdict"] == "warn"


def test_recorder_bind_defaults():
    rec = Recorder(rank=3, node="node2", rail=1, iteration=4)
    record = rec.bind("suite/test_x.py::test_y", "p2p")
    r = record("latency", 2.5, "us")
    assert r["test"] == "suite/test_x.py::test_y"
    assert r["suite"] == "p2p"
    assert r["nodes"] == ["node2"]
    assert r["ranks"] == [3]
    assert r["rail"] == 1
    assert r["iteration"] == 4
    assert r["metric"] == "latency" and r["value"] == 2.5 and r["unit"] == "us"


def test_recorder_bind_overrides():
    rec = Recorder(rank=3, node="node2", rail=1)
    record = rec.bind("t", "p2p")
    r = record("bw", 10, "GB/s", nodes=["a", "b"], ranks=[0, 1], rail=None, iteration=9,
               suite="collective", size=1024, verdict="pass", threshold=5.0)
    assert r["nodes"] == ["a", "b"]
    assert r["ranks"] == [0, 1]
    assert r["rail"] is None
    assert r["iteration"] == 9
    assert r["suite"] == "collective"
    assert r["size"] == 1024 and r["verdict"] == "pass" and r["threshold"] == 5.0


def test_recorder_take_clears():
    rec = Recorder(rank=0, node="n", rail=None)
    record = rec.bind("t", "s")
    a = record("m1", 1, "x")
    b = record("m2", 2, "x")
    assert rec.take() == [a, b]
    assert rec.take() == []


def test_recorder_bad_record_not_kept():
    rec = Recorder(rank=0, node="n", rail=None)
    record = rec.bind("t", "s")
    with pytest.raises(RecordError):
        record("m", float("nan"), "x")
    assert rec.take() == []


def test_run_folder_create(tmp_path):
    f = RunFolder.create(tmp_path, "run-1")
    assert f.path == tmp_path / "run-1"
    assert (tmp_path / "run-1" / "logs").is_dir()
    assert f.run_id == "run-1"
    assert f.run_json == tmp_path / "run-1" / "run.json"
    assert f.results == tmp_path / "run-1" / "results.jsonl"
    assert f.junit == tmp_path / "run-1" / "junit.xml"
    assert f.log(5) == tmp_path / "run-1" / "logs" / "rank-5.log"


def test_run_folder_create_generates_id(tmp_path):
    f = RunFolder.create(tmp_path)
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", f.run_id)
    assert (f.path / "logs").is_dir()


def test_write_run_atomic_and_update_merges(tmp_path):
    f = RunFolder.create(tmp_path, "r")
    f.write_run({"a": 1, "b": {"c": 2}})
    assert sorted(p.name for p in f.path.iterdir()) == ["logs", "run.json"]
    assert json.loads(f.run_json.read_text()) == {"a": 1, "b": {"c": 2}}
    assert f.run_json.read_text().endswith("\n")
    merged = f.update_run(a=5, d="x")
    assert merged == {"a": 5, "b": {"c": 2}, "d": "x"}
    assert f.read_run() == merged
    assert sorted(p.name for p in f.path.iterdir()) == ["logs", "run.json"]  # no temporary or lock file left


def test_concurrent_updates_from_threads_and_processes_lose_nothing(tmp_path):
    import subprocess
    import sys
    import threading
    f = RunFolder.create(tmp_path, "r")
    f.write_run({})
    script = ("import sys\nfrom acceptance.records.results import RunFolder\n"
              "for i in range(40):\n    RunFolder(sys.argv[1]).update_run(**{f'{sys.argv[2]}{i}': i})\n")

    def writer(prefix):
        for i in range(40):
            RunFolder(f.path).update_run(**{f"{prefix}{i}": i})
    procs = [subprocess.Popen([sys.executable, "-c", script, str(f.path), f"p{n}_"]) for n in range(2)]
    threads = [threading.Thread(target=writer, args=(f"t{n}_",)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert len(f.read_run()) == 4 * 40


def test_update_run_without_run_json(tmp_path):
    f = RunFolder.create(tmp_path, "r")
    assert f.update_run(complete=False) == {"complete": False}
    assert f.read_run() == {"complete": False}


def test_append_records(tmp_path):
    f = RunFolder.create(tmp_path, "r")
    assert f.append_records([]) == 0
    assert not f.results.exists()
    r1 = make_record(value=1, **BASE)
    r2 = make_record(value=None, detail="d", **BASE)
    r3 = make_record(value=2.5, **BASE)
    assert f.append_records([r1, r2]) == 2
    assert f.append_records(r for r in [r3]) == 1
    lines = f.results.read_text().splitlines()
    assert len(lines) == 3
    assert [json.loads(line) for line in lines] == [r1, r2, r3]


def test_new_run_id_format():
    a = new_run_id()
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", a)
    datetime.strptime(a[:15], "%Y%m%d-%H%M%S")


def test_utc_now_format():
    now = utc_now()
    assert now.endswith("Z")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", now)


def test_the_published_record_schema_is_the_records_contract():
    """docs/record.schema.json says what results.py and the catalog say, key for key."""
    from acceptance.rules import catalog
    from acceptance.records.results import (
        BOUND_ORIGINS,
        MEMORY,
        PHASES,
        OPTIONAL_KEYS,
        REQUIRED_KEYS,
        SATURATED,
        SCOPES,
        VERDICTS,
    )
    schema = json.loads((Path(__file__).resolve().parents[2] / "docs" / "record.schema.json").read_text())
    props = schema["properties"]
    assert schema["required"] == list(REQUIRED_KEYS)
    assert list(props) == [*REQUIRED_KEYS, *OPTIONAL_KEYS]
    assert all(name in props["suite"]["description"] for name in catalog.SUITES)
    assert props["verdict"]["enum"] == list(VERDICTS) and props["bound"]["enum"] == list(BOUND_ORIGINS)
    assert props["phase"]["enum"] == list(PHASES)
    assert props["memory"]["enum"] == list(MEMORY) and props["scope"]["enum"] == list(SCOPES)
    assert props["saturated"]["enum"] == list(SATURATED)


def test_records_made_here_match_the_schema(tmp_path):
    import recordschema
    f = RunFolder.create(tmp_path, "r")
    f.append_records([make_record(value=1, op="allreduce", scope="rail", **BASE),
                      make_record(value=None, detail="d", device="mlx5_0", port=1, saturated="before", **BASE)])
    assert recordschema.problems(f.results) == []
    f.results.write_text(f.results.read_text().replace('"scope": "rail"', '"scope": "rail0"'))
    (bad,) = recordschema.problems(f.results)
    assert ":1: scope: 'rail0' is not one of" in bad
    f.results.unlink()  # not left for the after-test check


def test_a_rank_spills_its_records_as_it_makes_them_and_a_lost_tests_records_are_kept(tmp_path):
    """Issue 42: records reach results.jsonl when their test ends; a rank lost inside a test would lose
    every round it had measured. Each rank's spill file holds them until the test lands."""
    folder = RunFolder.create(tmp_path, "run")
    a = Recorder(rank=0, node="node1", rail=0, spill=folder.spill(0))
    b = Recorder(rank=1, node="node2", rail=0, spill=folder.spill(1))
    first = [a.bind("t::first", "rdma_write"), b.bind("t::first", "rdma_write")]
    for rec in first:
        rec("bandwidth", 10.0, "Gbit/s", size=8)
    folder.append_lines([a.take_lines(), b.take_lines()])  # the test ended: rank 0 wrote them
    a.landed()
    # rank 1 was stopped before it emptied its spill: the landed test is not kept twice
    for rec in (a.bind("t::second", "rdma_write"), b.bind("t::second", "rdma_write")):
        rec("bandwidth", 11.0, "Gbit/s", size=8)
        rec("bandwidth", 12.0, "Gbit/s", size=16)
    with open(folder.spill(1), "a") as f:
        f.write('{"test": "t::second", "cut sh')  # killed while writing a line
    assert folder.salvage() == (4, 2)
    lines = [json.loads(line) for line in folder.results.read_text().splitlines()]
    assert [(r["test"], r["value"]) for r in lines] == [("t::first", 10.0)] * 2 + [("t::second", 11.0),
                                                                                    ("t::second", 12.0)] * 2
    assert not list((folder.path / "logs").glob("records-rank-*"))
    assert folder.salvage() == (0, 0)



def test_a_failed_phase_written_before_a_tests_records_does_not_make_them_landed(tmp_path):
    folder = RunFolder.create(tmp_path, "run")
    rec = Recorder(rank=0, node="node1", rail=0, spill=folder.spill(0))
    rec.bind("t::x", "rdma_write")("bandwidth", 10.0, "Gbit/s", size=8)
    folder.append_records([make_record(test="t::x", suite="rdma_write", metric=FAILED_METRIC, value=None, unit="",
                                       nodes=["node1"], ranks=[0], verdict="fail")])  # the call phase failed
    assert folder.salvage() == (1, 1)  # the job was lost before teardown: the measured value is kept


def test_a_spill_file_is_removed_at_the_end_only_when_its_records_landed(tmp_path):
    folder = RunFolder.create(tmp_path, "run")
    landed, lost = (Recorder(rank=r, node="n", rail=None, spill=folder.spill(r)) for r in (0, 1))
    for rec in (landed, lost):
        rec.bind("t", "rdma_write")("bandwidth", 1.0, "Gbit/s")
    landed.take_lines()
    landed.landed()
    landed.close()
    lost.close()
    assert not folder.spill(0).exists() and folder.spill(1).read_text().count("\n") == 1


def test_staged_records_land_whole_and_a_dropped_stage_lands_nothing(tmp_path):
    """Rank 0 sets each rank's records aside as they arrive (stage_lines) and appends them once every rank
    has (land_staged): results.jsonl gets every line once; a stage dropped (a sync point that never
    completed: the spill files keep it) adds nothing."""
    from acceptance.records.results import make_record

    def line(v):
        return json.dumps(make_record(test="t::x", suite="rdma_write", metric="bandwidth", value=float(v),
                                      unit="Gbit/s", nodes=["n1", "n2"], ranks=[0, 1])) + "\n"
    folder = RunFolder.create(tmp_path, "r")
    folder.append_lines([line(0)])
    folder.stage_lines([line(1) + line(2), ""])
    folder.stage_lines([line(3)])
    assert folder.land_staged() > 0 and not folder.staged.exists()
    assert [json.loads(x)["value"] for x in folder.results.read_text().splitlines()] == [0, 1, 2, 3]
    folder.stage_lines([line(4)])
    folder.drop_staged()
    assert folder.land_staged() == 0
    assert folder.results.read_text().count("\n") == 4
