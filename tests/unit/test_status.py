"""Rank 0 says how far a run is (issue 42): the test in hand, its round, the time elapsed and left by
the plan, on its terminal and in status.json, at least every 30 s."""
import io
import json
import threading
import time

from acceptance.runtime import status


def test_the_status_names_the_test_its_round_and_the_time_left_by_the_plan(tmp_path):
    out = io.StringIO()
    s = status.Status(tmp_path, out, estimate_s=600.0)
    s.tests = 45
    s.begin("suites/test_rdma_write.py::test_write_bandwidth[rails]", "rdma_write", 7)
    status.round_begun(120, 1023)
    state = s.write()
    assert json.loads((tmp_path / status.STATUS_FILE).read_text()) == state
    assert (state["test_index"], state["tests"], state["round"], state["rounds"]) == (7, 45, 120, 1023)
    assert 590 < state["left_s"] <= 600
    line = out.getvalue()
    assert "test 7 of 45 (rdma_write: suites/test_rdma_write.py::test_write_bandwidth[rails]); round 120 of 1023; " \
           "about 10 min 0 s left by the plan" in line or "about 9 min" in line, line
    # A new test forgets the last one's round; past the estimate, the line says by how much.
    s.begin("suites/test_collectives.py::test_allreduce", "collective", 8)
    assert s.now()["round"] is None
    s.started, s.estimate_s = time.monotonic() - 30, 10.0  # 30 s in, against a plan of 10 s
    assert "; 20 s past the plan's estimate" in status.Status.line(s.now())
    assert status.EVERY_S <= 30


def test_the_reporter_writes_on_its_own_until_stopped(tmp_path):
    class Out(io.StringIO):
        def __init__(self):
            super().__init__()
            self.wrote = threading.Event()

        def flush(self):
            self.wrote.set()

    out = Out()
    s = status.Status(tmp_path, out, estimate_s=None, every_s=0.01)
    s.start(3)
    assert out.wrote.wait(60), "no status line"
    state = json.loads((tmp_path / status.STATUS_FILE).read_text())
    assert state["tests"] == 3 and state["left_s"] is None and "left" not in out.getvalue()
    s.stop()  # the run ended: its own files say the rest
    assert not (tmp_path / status.STATUS_FILE).exists()
