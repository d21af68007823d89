"""`acceptance node-check` as Slurm runs it: the console script in its own process, on this machine's own
/sys and kernel log (no stand-ins), answering in time and saying why for each check it skips."""
import json
import time


def test_node_check_answers_on_this_machine_within_its_deadline(acceptance_cli, tmp_path):
    # The deadline is node-check's own clock (node_check.deadline). The process around it is kept light by
    # what it imports, asserted below, not by a wall clock: CI shares its cores with QEMU and MPI jobs,
    # which stretched a 0.9 s start to 11.6 s once. Slurm's own limit on the program is the bound here.
    t0 = time.monotonic()
    p = acceptance_cli("node-check", "--json", "--profile", "local", "--state", str(tmp_path / "state"),
                       timeout=60)
    seconds = time.monotonic() - t0
    out = json.loads(p.stdout)
    assert out["seconds"] < 10 and seconds < 60, (seconds, out)
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


def test_node_check_starts_without_the_analysis_stack(tmp_path):
    """Every node runs node-check every HealthCheckInterval: its process imports no pandas, jinja2,
    matplotlib or mpi4py (the analysis, report and MPI layers), only what its checks use."""
    import subprocess
    import sys
    code = ("import sys; from acceptance.cli import main; "
            f"main(['node-check', '--json', '--profile', 'local', '--state', {str(tmp_path / 'state')!r}]); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'jinja2', 'matplotlib', 'mpi4py'}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.splitlines()[-1] == "[]", p.stdout + p.stderr


def test_the_wrapper_as_a_prolog_fails_a_job_only_after_draining_its_node(tmp_path):
    """slurm/node-check.sh as slurmd runs it (no PATH, SLURMD_NODENAME): as a prolog, exit 1 only on a
    failure node-check drained the node for; a check that could not run (here a bad profile) lets the
    job start (0), where as a HealthCheckProgram it says 2. Either way the bad profile touches no node."""
    import os
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    log = tmp_path / "scontrol.log"
    base = {"SLURMD_NODENAME": "gpu07", "ACCEPTANCE_SITE_ENV": os.devnull, "FAKE_SCONTROL_LOG": str(log),
            "ACCEPTANCE_NODE_CHECK_STATE": str(tmp_path / "state"), "ACCEPTANCE_PROFILE": str(tmp_path / "nope.toml"),
            "FAKE_SCONTROL_STATE": str(tmp_path / "nodes.json")}
    # slurmd's environment has no PATH: the wrapper sets one (and finds the checkout's .venv itself).
    for context, want in (("", 2), ("prolog_slurmd", 0)):
        env = {**base, **({"SLURM_SCRIPT_CONTEXT": context} if context else {})}
        p = subprocess.run([str(root / "slurm" / "node-check.sh")], env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == want, (context, p.returncode, p.stdout + p.stderr)
    assert not log.exists()
    sysfs = tmp_path / "sys"
    (sysfs / "class").mkdir(parents=True)  # no RDMA device: the profile's ports requirement fails
    profile = tmp_path / "site.toml"
    profile.write_text('extends = "local"\n[preflight]\nport_rate = "400Gbit/s"\n[node_check]\nchecks = ["ports"]\n')
    env = {**base, "ACCEPTANCE_PROFILE": str(profile), "ACCEPTANCE_SYSFS_ROOT": str(sysfs),
           "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "PATH": f"{root / 'tests' / 'fakeslurm'}:/usr/bin:/bin"}
    p = subprocess.run([str(root / "slurm" / "node-check.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "slurm: drained: drained gpu07: acceptance: ports: RDMA: " in p.stdout, p.stdout
