"""How close `acceptance plan`'s estimate is to measured runs, suite by suite.

    .venv/bin/python benchmarks/plan_accuracy.py                  # local 2 x 2 and 4 virtual nodes x 2 rails
    .venv/bin/python benchmarks/plan_accuracy.py --repeat 2       # each twice: the spread a shared machine adds
    .venv/bin/python benchmarks/plan_accuracy.py --emulated       # also on the emulated Slurm cluster, if it is up
    .venv/bin/python benchmarks/plan_accuracy.py --from reports/RUN_ID ...   # run folders already measured
    .venv/bin/python benchmarks/plan_accuracy.py --quick          # smoke run: 2 x 2, preflight, memreg, incast

Each run is a real acceptance run (`acceptance run --launcher local --nodes N --ranks-per-node R
--profile P --no-report -- -m MARKERS`; on the emulated cluster `sbatch --wait -N N
slurm/acceptance.sbatch`). A suite's measured wall time is the sum of its testcases' times in the
run's junit.xml (skipped tests excluded); its estimate is acceptance.runtime.estimate's for the same
nodes, rails, profile, pattern and rail mode (run.json "schedule" and "rail_mode") and engine
(run.json "engines"), summed over the tests that ran. The estimate never reads this machine's
load or cores: virtual and emulated nodes share them, which the table's head says.

The load average (1 min) before and after each run, and the cores our ranks got on average (CPU
seconds of the run's processes over its wall time; local runs only), are printed beside it: the
machine is shared, and a run that got a fraction of a core per rank takes correspondingly longer
than the estimate, which assumes the host's cores are ours.

A suite is "within" when |measured - estimated| <= TOLERANCE x estimated (the issue's ±30%).
Exit 0 whatever the ratios (a measurement, not a test), 1 on an error (a run that left no junit.xml).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acceptance.runtime import estimate as model  # noqa: E402
from acceptance.runtime import schedule as sched  # noqa: E402
from acceptance.rules.profile import load_profile  # noqa: E402

TOLERANCE = 0.30  # the issue's ±30%
# name -> (nodes, ranks per node, profile, markers); markers None: every suite
LOCAL_RUNS = {"local": (2, 2, "local", None), "virtual": (4, 2, "local", None)}
QUICK = (2, 2, "local", "preflight or memreg or congestion")
EMULATED_NODES = 4
RUN_TIMEOUT_S = 1800


# ---- measured ------------------------------------------------------------------------------------

def measured_tests(run_dir: Path) -> dict[str, dict[str, float]]:
    """{suite: {test name: seconds}} from junit.xml, tests that ran (not skipped); suite = the suite
    file's name without "test_" (suites/test_rdma_write.py: rdma_write), as the catalog and the estimate
    name them (test_collectives.py: collective)."""
    out: dict[str, dict[str, float]] = {}
    for case in ET.parse(run_dir / "junit.xml").getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        suite = case.get("classname", "").rsplit(".", 1)[-1].removeprefix("test_")
        suite = {"collectives": "collective"}.get(suite, suite)  # its file's plural; the catalog's name
        out.setdefault(suite, {})
        name = case.get("name", "")
        out[suite][name] = out[suite].get(name, 0.0) + float(case.get("time") or 0.0)
    return out


def run_span(run_dir: Path) -> float | None:
    """run.json start to end: the ranks' whole pytest session (launch and analysis not included)."""
    from datetime import datetime
    meta = json.loads((run_dir / "run.json").read_text())
    if not meta.get("start") or not meta.get("end"):
        return None
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()  # noqa: E731
    return parse(meta["end"]) - parse(meta["start"])


# ---- estimated -----------------------------------------------------------------------------------

def model_key(suite_tests: dict[str, float], name: str) -> str | None:
    """The estimate's test for a junit testcase: rails' parameters ([rails], [rail3]) fold into the
    estimate's per-test figure, which already covers every rail (concurrent or one after another)."""
    name = re.sub(r"\[rail\d+\]", "[rails]", name)
    if name in suite_tests:
        return name
    base = name.split("[", 1)[0]
    return base if base in suite_tests else None


def run_facts(run_dir: Path) -> dict:
    """What the estimate needs, as run.json records it."""
    meta = json.loads((run_dir / "run.json").read_text())
    prof = meta.get("profile") or {}
    source = prof.get("source")
    profile = load_profile(source if source and Path(source).exists() else prof.get("name") or "local")
    topo = meta.get("topology") or {}
    nodes, rails = len(topo.get("nodes") or {}), len(topo.get("rails") or [])
    pattern = (meta.get("schedule") or {}).get("pattern") or profile.get("rdma_write.pattern")
    if sched.parse_pattern(pattern)[0] == sched.AUTO:  # as the ranks resolved it, durations included
        pattern, profile, _ = model.resolve(profile, nodes, rails, meta.get("rail_mode") or "concurrent",
                                            profile.get("run.budget"), pattern=pattern)
    engines = {e.get("engine") for e in (meta.get("engines") or {}).values() if isinstance(e, dict)}
    engine = "mpi" if engines == {"mpi"} else (profile.get("run.engine") if not engines else "hardware")
    return {"profile": profile, "nodes": nodes, "rails": rails, "pattern": pattern,
            "rail_mode": meta.get("rail_mode") or "concurrent", "engine": engine,
            "ranks": topo.get("world_size") or nodes * rails}


def compare(run_dir: Path, label: str, wall: float | None, extra: dict) -> dict:
    """Per suite: estimated, measured, ratio, within; and the whole run."""
    facts = run_facts(run_dir)
    est = model.estimate(facts["profile"], facts["nodes"], facts["rails"], facts["pattern"], facts["rail_mode"],
                         engine=facts["engine"])
    measured = measured_tests(run_dir)
    rows = []
    for suite, tests in measured.items():
        modelled = est.tests.get(suite, {})
        keys = {model_key(modelled, name) for name in tests}
        if suite in ("preflight", "counters"):  # modelled per suite, not per test
            estimated = est.suites.get(suite, 0.0)
        else:
            estimated = sum(modelled[k] for k in keys if k)
        seconds = sum(tests.values())
        rows.append(row(suite, estimated, seconds))
    span = run_span(run_dir)
    ran = sum(r["estimated"] for r in rows)
    overheads = sum(est.overheads.values())
    whole = [row("suites (run.json start to end)", ran, span)] if span is not None else []
    if wall is not None:
        whole.append(row("whole run (launch to exit)", ran + overheads, wall))
    return {"label": label, "run_dir": str(run_dir), "profile": facts["profile"].name, "nodes": facts["nodes"],
            "rails": facts["rails"], "ranks": facts["ranks"], "pattern": facts["pattern"],
            "rail_mode": facts["rail_mode"], "engine": facts["engine"], "host_cores": os.cpu_count() or 1,
            "suites": rows, "whole": whole, **extra}


def row(name: str, estimated: float, measured: float | None) -> dict:
    ratio = measured / estimated if measured is not None and estimated > 0 else None
    within = ratio is not None and abs(ratio - 1) <= TOLERANCE
    return {"suite": name, "estimated": round(estimated, 2), "measured": None if measured is None else round(measured, 2),
            "ratio": None if ratio is None else round(ratio, 2), "within": within}


# ---- running -------------------------------------------------------------------------------------

def clean_env() -> dict:
    """No launcher or harness variables from an outer run or job."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "ACCEPTANCE_", "PMI", "PYTEST_"))}


def run_local(label: str, nodes: int, rpn: int, profile: str, markers: str | None, out: Path) -> dict:
    cmd = [sys.executable, "-m", "acceptance", "run", "--launcher", "local", "--nodes", str(nodes),
           "--ranks-per-node", str(rpn), "--profile", profile, "--no-report", "--output", str(out)]
    if markers:
        cmd += ["--", "-m", markers]
    load0 = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    run_dir = found_run_dir(p.stdout + p.stderr, out)
    if p.returncode not in (0, 1) or run_dir is None or not (run_dir / "junit.xml").exists():
        raise RuntimeError(f"{label}: acceptance run exited {p.returncode}, no junit.xml:\n{(p.stdout + p.stderr)[-3000:]}")
    return compare(run_dir, label, wall, {
        "exit": p.returncode, "markers": markers, "load_before": round(load0, 1),
        "load_after": round(os.getloadavg()[0], 1), "cores_used": round(cpu / wall, 2)})


def found_run_dir(text: str, out: Path) -> Path | None:
    m = re.findall(r"run folder:? (\S+)", text)
    if m:
        return Path(m[-1])
    runs = sorted(p for p in out.iterdir() if p.is_dir()) if out.exists() else []
    return runs[-1] if runs else None


def emulated_up() -> str | None:
    """None when the emulated cluster answers, else why not."""
    if not shutil.which("sbatch"):
        return "no sbatch on this machine"
    try:
        p = subprocess.run([sys.executable, str(ROOT / "tests/cluster/emucluster.py"), "status"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"emucluster.py status: {e}"
    text = p.stdout + p.stderr
    if p.returncode != 0 or "slurmctld=" not in text or "sinfo:" not in text:
        return "not up (tests/cluster/emucluster.py status: " + (text.strip().splitlines() or ["no output"])[-1] + ")"
    return None


def run_emulated(nodes: int, markers: str | None, out: Path, exclude: str | None = None,
                 profile: str | None = None) -> dict:
    env = {**clean_env(), "ACCEPTANCE_OUTPUT": str(out)}
    if profile:  # else the cluster's site.env (emulated)
        env["ACCEPTANCE_PROFILE"] = profile
    if markers:
        env["ACCEPTANCE_MARKERS"] = markers
    load0 = os.getloadavg()[0]
    cmd = ["sbatch", "--wait", "-N", str(nodes), "-o", str(out / "slurm-%j.out")] + (["--exclude", exclude] if exclude else [])
    p = subprocess.run(cmd + [str(ROOT / "slurm/acceptance.sbatch")], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    run_dir = found_run_dir("", out)
    if run_dir is None or not (run_dir / "junit.xml").exists():
        raise RuntimeError(f"emulated: sbatch exited {p.returncode}, no run folder with junit.xml in {out}: "
                           f"{(p.stdout + p.stderr)[-2000:]}")
    # sbatch's wall includes the queue: the whole run is run.json's span, this machine's cores shared.
    return compare(run_dir, f"emulated {nodes} nodes" + (f", profile {profile}" if profile else ""), None, {
        "exit": p.returncode, "markers": markers, "load_before": round(load0, 1),
        "load_after": round(os.getloadavg()[0], 1)})


# ---- output --------------------------------------------------------------------------------------

def table(result: dict) -> str:
    head = (f"{result['label']}: {result['nodes']} nodes x {result['rails']} rails, profile {result['profile']}, "
            f"engine {result['engine']}, {result['pattern']}, rails {result['rail_mode']}, "
            f"{result['ranks']} ranks on {result['host_cores']} cores")
    load = []
    if "load_before" in result:
        load.append(f"load average {result['load_before']} before, {result['load_after']} after")
    if "cores_used" in result:
        load.append(f"cores our ranks got: {result['cores_used']}")
    if result.get("markers"):
        load.append(f"-m {result['markers']!r}")
    lines = [head, "  " + "; ".join(load) if load else None,
             f"  run folder {result['run_dir']}" + (" (removed)" if not Path(result["run_dir"]).exists() else ""),
             f"  {'suite':32} {'estimated':>10} {'measured':>10} {'ratio':>6}  within ±{TOLERANCE:.0%}"]
    for r in result["suites"] + result["whole"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        measured = "-" if r["measured"] is None else f"{r['measured']:.1f} s"
        lines.append(f"  {r['suite']:32} {r['estimated']:>8.1f} s {measured:>10} {ratio:>6}  "
                     f"{'yes' if r['within'] else 'no'}")
    return "\n".join(line for line in lines if line is not None)


def summary(results: list[dict]) -> str:
    rows = [r for res in results for r in res["suites"]]
    within = sum(r["within"] for r in rows)
    return f"suites within ±{TOLERANCE:.0%}: {within}/{len(rows)}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="local,virtual", help="local runs: local (2 x 2), virtual (4 x 2), comma-separated")
    ap.add_argument("--repeat", type=int, default=1, help="run each this many times")
    ap.add_argument("--markers", default=None, help="pytest -m for every run (default: every suite)")
    ap.add_argument("--emulated", action="store_true", help="also on the emulated Slurm cluster, if it is up")
    ap.add_argument("--emulated-nodes", type=int, default=EMULATED_NODES)
    ap.add_argument("--emulated-exclude", default=None, metavar="NODES",
                    help="sbatch --exclude: leave out a node the cluster throttles (its caps are no model's)")
    ap.add_argument("--emulated-profile", default=None, metavar="NAME",
                    help="profile of the emulated runs (default: the cluster's, emulated), e.g. fleet")
    ap.add_argument("--softroce", action="store_true", help="the Soft-RoCE rig (not run here: says so)")
    ap.add_argument("--from", dest="dirs", nargs="+", type=Path, default=[], help="compare run folders already measured")
    ap.add_argument("--output", type=Path, default=None, help="where the runs' folders go (default: a temporary folder)")
    ap.add_argument("--quick", action="store_true", help="one 2 x 2 run of preflight, memreg and incast (smoke test)")
    ap.add_argument("--json", action="store_true", help="the results as one JSON list on stdout")
    args = ap.parse_args(argv)

    results, notes = [], []
    out = args.output or Path(tempfile.mkdtemp(prefix="plan_accuracy-"))
    try:
        if args.dirs:
            for d in args.dirs:
                results.append(compare(d, d.name, None, {}))
        elif args.quick:
            n, r, prof, m = QUICK
            results.append(run_local("quick", n, r, prof, m, out))
        else:
            for name in [s for s in args.runs.split(",") if s]:
                if name not in LOCAL_RUNS:
                    ap.error(f"--runs: unknown {name!r} (local, virtual)")
                n, r, prof, m = LOCAL_RUNS[name]
                for i in range(args.repeat):
                    label = name + (f" #{i + 1}" if args.repeat > 1 else "")
                    results.append(run_local(label, n, r, prof, args.markers or m, out))
            if args.emulated:
                why = emulated_up()
                if why:
                    notes.append(f"emulated: skipped: the emulated cluster is {why}")
                else:
                    for _ in range(args.repeat):
                        results.append(run_emulated(args.emulated_nodes, args.markers, out, args.emulated_exclude,
                                                    args.emulated_profile))
        if args.softroce:
            notes.append("softroce: not run here (the Soft-RoCE rig is a QEMU guest: tests/cluster/softroce.py); "
                         "run this benchmark inside it with --from on its run folders")
    except Exception as e:  # noqa: BLE001 - a benchmark reports and exits 1
        print(f"plan_accuracy: error: {e}", file=sys.stderr)
        return 1
    finally:
        if args.quick and not args.output:  # a smoke run leaves nothing behind
            shutil.rmtree(out, ignore_errors=True)
    if args.json:
        print(json.dumps({"results": results, "notes": notes, "tolerance": TOLERANCE}, indent=1))
        return 0
    for res in results:
        print(table(res))
        print()
    for note in notes:
        print(note)
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
