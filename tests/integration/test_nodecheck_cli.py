"""`acceptance node-check` as Slurm runs it: the console script in its own process, on this machine's own
/sys and kernel log (no stand-ins), answering in time and saying why for each check it skips."""
import json
import time


def test_node_check_answers_on_this_machine_within_its_deadline(acceptance_cli, tmp_path):
    t0 = time.monotonic()
    p = acceptance_cli("node-check", "--json", "--profile", "local", "--state", str(tmp_path / "state"))
    seconds = time.monotonic() - t0
    out = json.loads(p.stdout)
    assert seconds < 10 and out["seconds"] < 10, (seconds, out)
    assert p.returncode == out["exit_code"] and out["verdict"] in ("pass", "fail", "error"), p.stdout + p.stderr
    assert [c["check"] for c in out["checks"]] == ["ports", "counters", "pcie", "memlock", "gpudirect", "gpus", "xid"]
    for c in out["checks"]:
        assert c["status"] in ("pass", "warn", "fail", "skip", "error"), c
        if c["status"] in ("skip", "error"):
            assert c["note"], c  # every check it could not run says why
    text = acceptance_cli("node-check", "--profile", "local", "--state", str(tmp_path / "state")).stdout
    assert text.splitlines()[-1].startswith("node-check "), text
    help_text = acceptance_cli("node-check", "--help").stdout
    assert "HealthCheckProgram" in help_text and "exit codes" in help_text
