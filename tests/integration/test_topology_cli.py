"""The switch tree on the command line: --topology on run, report and plan, and its errors."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import synthetic  # noqa: E402


def _conf(path: Path, leaves: dict[str, str]) -> Path:
    lines = ["# written like Slurm's tree plugin reads it", *(f"SwitchName={k} Nodes={v}" for k, v in leaves.items()),
             f"SwitchName=spine Switches={','.join(leaves)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_bad_line_exits_2_naming_file_line_and_why(acceptance_cli, tmp_path):
    bad = tmp_path / "topology.conf"
    bad.write_text("SwitchName=s1 Nodes=node[01-04]\nSwitchName=s2 Nodez=node[05-08]\n")
    for args in (("plan", "--rails", "2", "--topology", str(bad)),
                 ("run", "--topology", str(bad), "--output", str(tmp_path / "reports"))):
        p = acceptance_cli(*args)
        assert p.returncode == 2, p.stdout + p.stderr
        assert f"{bad}:2:" in p.stderr and "Nodez" in p.stderr, p.stderr
    assert not (tmp_path / "reports").exists() or not any((tmp_path / "reports").iterdir())  # nothing launched
    run = synthetic.make_run(tmp_path / "run", nodes=8, rails=2, sizes=(8388608,))
    p = acceptance_cli("report", str(run), "--topology", str(bad))
    assert p.returncode == 2 and f"{bad}:2:" in p.stderr, p.stdout + p.stderr


def test_report_with_a_tree_names_the_uplink_and_drains_nobody(acceptance_cli, tmp_path):
    names = synthetic.node_names(16)
    run = synthetic.make_run(tmp_path / "run", nodes=16, rails=4, sizes=(8388608,))
    conf = _conf(tmp_path / "topology.conf", {f"leaf{i + 1}": f"node[{4 * i + 1:02d}-{4 * i + 4:02d}]"
                                              for i in range(4)})
    leaf3 = set(names[8:12])
    path = run / "results.jsonl"
    out = []
    for line in path.read_text().splitlines():  # leaf3's uplink on rail 2 at 60%
        rec = json.loads(line)
        if (rec["suite"] == "rdma_write" and rec.get("rail") == 2 and len(rec["nodes"]) == 2
                and (rec["nodes"][0] in leaf3) != (rec["nodes"][1] in leaf3)):
            rec["value"] = rec["value"] * 0.6 if rec["metric"] in ("bandwidth", "read_bandwidth") else rec["value"] / 0.6
        out.append(json.dumps(rec))
    path.write_text("\n".join(out) + "\n")
    p = acceptance_cli("report", str(run))
    assert p.returncode == 1 and "State=DRAIN" in p.stdout, p.stdout   # without the tree: its nodes' NICs
    p = acceptance_cli("report", str(run), "--topology", str(conf))
    assert p.returncode == 1, p.stdout + p.stderr
    findings = json.loads((run / "findings.json").read_text())
    assert [(f["scope"], f["switch"], f["rail"]) for f in findings if f["severity"] == "fail"] == [("uplink", "leaf3", 2)]
    assert "State=DRAIN" not in p.stdout and (run / "drain.txt").read_text() == ""
    assert json.loads((run / "run.json").read_text())["fabric"]["source"] == str(conf)
    p = acceptance_cli("plan", "--run", str(run))
    assert p.returncode == 0 and "no finding is ambiguous" in p.stdout, p.stdout + p.stderr
