"""This node's Slurm state as scontrol and sinfo print it (acceptance.host.slurmnode), from outputs shaped
as Slurm 23.11 and 24.05 print them (tests/data/slurm/README names the public captures they follow).

scontrol runs as a stand-in on PATH that prints a file and logs its arguments, so read_state, apply_drain
and apply_resume run exactly as on a node: one argv, `scontrol show node -o NAME`, then (maybe) an update.
"""
import json
import sys
from pathlib import Path

import pytest

from acceptance.host import slurmnode

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
DRAINED = (DATA / "scontrol-show-node-24.05-idle-drain.txt").read_text()
CUT = (DATA / "scontrol-show-node-23.11-down-not-responding-cut.txt").read_text()
# The rest of a 23.11 record after ResumeAfterTime= (node_info.c): what the cut capture lost.
DOWN = CUT + ("   CfgTRES=cpu=32,mem=500000M,billing=32,gres/gpu=4\n   AllocTRES=\n"
              "   CurrentWatts=0 AveWatts=0\n   Reason=Not responding [slurm@2025-02-03T17:31:02]\n\n")


def one_line(multi: str) -> str:
    """`scontrol show node -o`'s line for a multi-line record: Slurm joins the fields with " " instead of
    "\\n   " and ends the record with one newline instead of two (node_info.c, line_end)."""
    return multi.rstrip("\n").replace("\n   ", " ") + "\n"


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """A stand-in scontrol (and sinfo) on PATH: prints what `show` is given, logs every argv."""
    log, shown = tmp_path / "calls.jsonl", tmp_path / "shown.txt"
    for tool in ("scontrol", "sinfo"):
        script = tmp_path / "bin" / tool
        script.parent.mkdir(exist_ok=True)
        script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                          f"open({str(log)!r}, 'a').write(json.dumps(sys.argv) + '\\n')\n"
                          f"if sys.argv[1:2] in (['show'], ['-h']):\n"
                          f"    sys.stdout.write(open({str(shown)!r}).read())\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")

    def show(text: str):
        shown.write_text(text)
        return lambda: [json.loads(x)[1:] for x in log.read_text().splitlines()] if log.exists() else []
    return show


def test_the_o_line_is_the_multi_line_record_joined_as_slurm_joins_it():
    line = one_line(DRAINED)
    assert line.count("\n") == 1 and line.startswith("NodeName=h100-b07 Arch=x86_64 CoresPerSocket=56  CPUAlloc=0 ")
    assert " AveWatts=0  Reason=gres/gpu count" in line  # 24.05's blank field line: two spaces


def test_a_drain_slurm_made_is_read_from_the_o_line_and_from_the_pasted_form_alike():
    want = slurmnode.NodeState("h100-b07", "IDLE+DRAIN", "gres/gpu count reported lower than configured (7 < 8)")
    assert slurmnode.parse_show_node(one_line(DRAINED), "h100-b07") == want
    assert slurmnode.parse_show_node(DRAINED, "h100-b07") == want
    # pasted where the blank field line lost its indent, and among other nodes' records
    pasted = one_line(DOWN) + DRAINED.replace("\n   \n", "\n\n") + "NodeName=h100-b08 State=IDLE\n"
    assert slurmnode.parse_show_node(pasted, "h100-b07") == want
    assert want.drained and not want.ours and not want.down  # [slurm@...] is Slurm's stamp, not part of it


def test_a_drain_by_slurm_is_left_and_never_resumed(scontrol):
    calls = scontrol(one_line(DRAINED))
    now = slurmnode.read_state("h100-b07")
    assert calls() == [["show", "node", "-o", "h100-b07"]]
    outcome, text = slurmnode.apply_drain(slurmnode.Drain("h100-b07", slurmnode.reason("gpus", "GPU 3 lost")))
    assert outcome == "left" and "already drained by someone else (gres/gpu count reported lower" in text
    assert slurmnode.apply_resume("h100-b07", now)[0] == "left"
    assert not [c for c in calls() if c[0] == "update"]


def test_a_node_down_not_responding_keeps_slurms_reason(scontrol):
    calls = scontrol(one_line(DOWN))
    now = slurmnode.read_state("a40-03")
    assert (now.state, now.reason, now.down, now.drained, now.ours) == (
        "DOWN+NOT_RESPONDING", "Not responding", True, False, False)
    outcome, text = slurmnode.apply_drain(slurmnode.Drain("a40-03", slurmnode.reason("ports", "mlx5_0 down")))
    assert (outcome, text) == ("left", "a40-03 is DOWN+NOT_RESPONDING, held by someone else (Not responding); "
                                       "left as it is")
    assert slurmnode.apply_resume("a40-03", now) == (
        "left", "a40-03 is not drained (DOWN+NOT_RESPONDING: not ours to resume)")
    assert not [c for c in calls() if c[0] == "update"]


@pytest.mark.parametrize("text", [CUT, CUT + "   CfgT", one_line(CUT)], ids=["lines", "inside-CfgTRES", "o-line"])
def test_a_record_cut_before_the_reason_of_a_down_node_is_said_and_nothing_is_done(scontrol, text):
    with pytest.raises(slurmnode.SlurmError, match=r"ends before its Reason= .*cut short\?\): "
                                                   r"State=DOWN\+NOT_RESPONDING"):
        slurmnode.parse_show_node(text, "a40-03")
    calls = scontrol(text)
    outcome, detail = slurmnode.apply_drain(slurmnode.Drain("a40-03", slurmnode.reason("ports", "mlx5_0 down")))
    assert outcome == "failed" and detail.startswith("could not drain a40-03: `scontrol show node a40-03` ends")
    assert [c[0] for c in calls()] == ["show"]


def test_a_cut_record_of_an_idle_node_reads_as_idle():
    """Its reason decides nothing (an idle node is drained on a failure, never resumed): the best reading."""
    idle = CUT.replace("State=DOWN+NOT_RESPONDING", "State=IDLE")
    assert slurmnode.parse_show_node(idle, "a40-03") == slurmnode.NodeState("a40-03", "IDLE", None)


def test_our_reason_is_read_whole_up_to_the_fields_after_it(scontrol):
    ours = slurmnode.reason("pcie", "NIC mlx5_1 (0000:44:00.0): LnkSta Width=x8 of x16 [seen@boot]")
    record = DRAINED.replace("gres/gpu count reported lower than configured (7 < 8)", ours).replace(
        "\n\n", "\n   Comment=rack 4 Extra={\"a\":1}\n\n")
    now = slurmnode.parse_show_node(one_line(record), "h100-b07")
    assert now.reason == ours and now.ours
    calls = scontrol(one_line(record))
    assert slurmnode.apply_drain(slurmnode.Drain("h100-b07", ours)) == (
        "drained", "h100-b07 is already drained with this reason")
    assert not [c for c in calls() if c[0] == "update"]


def test_a_reason_of_several_lines_reads_as_one():
    """Slurm prints a reason's further lines under its first, after the stamp (node_info.c)."""
    record = DRAINED.replace("[slurm@2025-03-02T08:14:51]\n", "[root@2025-03-02T08:14:51]\n          see ticket 4411\n")
    assert slurmnode.parse_show_node(one_line(record), "h100-b07").reason == (
        "gres/gpu count reported lower than configured (7 < 8) see ticket 4411")


def test_drained_for_counts_what_sinfo_prints_per_node(scontrol):
    """`sinfo -h -N -o %N|%T|%E`: one line per node and partition, %T with sinfo's state suffixes
    (* not responding), %E "none" without a reason, never the [user@time] stamp."""
    calls = scontrol("compute001|drained|Low RealMemory\n"
                     "compute002|drained*|Low RealMemory\n"
                     "h100-b07|drained|acceptance: ports: mlx5_1 port 1: 1: DOWN\n"
                     "h100-b07|drained|acceptance: ports: mlx5_1 port 1: 1: DOWN\n"   # in a second partition
                     "h100-b08|draining|acceptance: ports: mlx5_3 port 1: rate 200 of 400 Gb/s\n"
                     "h100-b09|drained|acceptance: pcie: NIC mlx5_0 (0000:44:00.0): x8 of x16\n"
                     "a40-03|down*|Not responding\n"
                     "a40-04|idle|none\n")
    assert slurmnode.drained_for("ports") == (2, 7)
    assert slurmnode.drained_for("pcie") == (1, 7)
    assert calls()[0] == ["-h", "-N", "-o", "%N|%T|%E"]
    assert slurmnode.parse_sinfo_nodes("compute002|drained*|Low RealMemory\na40-04|idle|none\n") == {
        "compute002": ("drained", "Low RealMemory"), "a40-04": ("idle", None)}
