"""The `acceptance` command line."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from .. import __version__
from . import launch
from ..spec.profile import ProfileError, format_profile, format_profile_list, load_profile
from ..records.results import ENV_ITERATION, InputError, RunFolder
from ..runtime.watchdog import END_GRACE_S

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3
# srun's report of a task that died, e.g. "srun: error: node4: tasks 6-7: Killed".
SRUN_TASK_ERROR = re.compile(r"srun: error: (\S+): tasks? ([\d,-]+): (Killed|Terminated|Exited with exit code \d+)")
REPO = Path(__file__).resolve().parents[2]
LAUNCHER_GRACE_S = 30.0  # beyond the ranks' own bound on their end, for the launcher to notice and exit

EPILOG = """\
exit codes: 0 all checks passed, 1 a check failed, 2 usage or input error,
            3 incomplete (hang, crash, lost rank)

examples:
  acceptance run                          embedded default: 4 local ranks as 2 nodes x 2 rails
  acceptance run -- -m preflight          only the preflight suite (pytest args after --)
  acceptance run --profile h100.toml      inside `salloc`/`sbatch`: srun over the allocation
  acceptance run --duration 8h            burn-in: repeat the suites for 8 hours
  acceptance report reports/<run-id>      re-analyze a run: findings.json, drain.txt, report.html
  acceptance compare RUN BASELINE         per-link changes against a good earlier run
  acceptance doctor                       what this machine offers (MPI, Slurm, RDMA, GPUs)
  acceptance profiles show local          the thresholds a profile resolves to
  acceptance counters diff A.json B.json  which port counters rose between two snapshots
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except ProfileError as e:
        print(f"acceptance: profile error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, InputError) as e:
        print(f"acceptance: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # a bug in the harness: show it, and never let it read as "a check failed"
        traceback.print_exc()
        print("acceptance: internal error (the traceback above is a harness bug); exit 3", file=sys.stderr)
        return EXIT_INCOMPLETE


class UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="acceptance",
        description="Is this GPU cluster's fabric fit for a long training run? Runs collective pytest "
                    "suites under MPI, compares with a thresholds profile, writes a run folder.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"acceptance {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run", help="run the acceptance suites and write a run folder",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the suites on every rank and write reports/<run-id>/ (run.json, results.jsonl, "
                    "junit.xml, logs/). Prints the run folder at the end.",
        epilog="launchers:\n"
               "  auto    srun inside a Slurm allocation, else local\n"
               "  local   mpiexec on this machine; ranks are grouped into virtual nodes node1..nodeN\n"
               "          (--nodes x --ranks-per-node, default from the profile: 2 x 2)\n"
               "  srun    srun over the current allocation (set ACCEPTANCE_SRUN_MPI for --mpi=, e.g. pmix):\n"
               "          the job's --ntasks-per-node if it set one, else --ranks-per-node (default: the\n"
               "          profile's run.ranks_per_node) ranks on each node of the job\n"
               "  mpirun  the system mpirun with --nodes x --ranks-per-node ranks, real host names\n\n"
               "Anything after -- goes to pytest, e.g. -- -m 'preflight or rail' -x\n" + EPILOG)
    run.add_argument("--profile", metavar="NAME|PATH|auto",
                     help="thresholds profile: a built-in name (acceptance profiles), a TOML file, or auto: the "
                          "built-in matching this node's GPUs and RDMA port rate (default: local, which only "
                          "checks that the harness works)")
    run.add_argument("--launcher", choices=["auto", *launch.LAUNCHERS], default="auto")
    run.add_argument("--nodes", type=_positive, metavar="N", help="nodes (local: virtual nodes)")
    run.add_argument("--ranks-per-node", type=_positive, metavar="R",
                     help="ranks per node = rails per node (one rank per GPU and NIC)")
    run.add_argument("--output", metavar="DIR", default=None,
                     help="folder that receives the run folder (default: ./reports)")
    run.add_argument("--hang-timeout", type=_seconds, metavar="SECONDS",
                     help="how long the job may go without progress on any rank before the ranks that did not "
                          "reach the sync point are reported as HANG; it bounds one step of a test (a round of "
                          "pairs, a size of a sweep), not the test; > 0: seconds or a duration like 10min "
                          "(default: the profile's run.hang_timeout)")
    burn = run.add_mutually_exclusive_group()
    burn.add_argument("--iterations", type=_positive, metavar="K",
                      help="burn-in: run the selected suites K times; records carry `iteration`")
    burn.add_argument("--duration", type=_seconds, metavar="SEC",
                      help="burn-in: repeat the suites until SEC seconds have passed (e.g. 3600, 8h, 30min)")
    run.add_argument("--drain", action="store_true",
                     help="execute the scontrol drain lines of failing nodes (default: only print them)")
    run.add_argument("--no-report", action="store_true",
                     help="analyze and decide the verdict (findings.json, drain.txt, run.json) but do not "
                          "render report.html, which takes seconds to minutes on a slow node or a large run; "
                          "`acceptance report RUN_DIR` writes it later")
    run.add_argument("--suites", metavar="PATH", default=None,
                     help="suites folder or file (default: ./suites, else the checkout's suites/)")
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then arguments for pytest")
    run.set_defaults(func=cmd_run)

    report = sub.add_parser(
        "report", help="(re)analyze a run folder: findings.json, drain.txt, report.html",
        description="Re-evaluate every record of RUN_DIR against its profile (run.json's, or --profile), "
                    "localize what is slow or broken, and (re)write findings.json, drain.txt and report.html "
                    "there. Works on a folder holding only results.jsonl and a run.json with run_id and "
                    "profile. Exit 1 when a finding fails.")
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--baseline", metavar="RUN_DIR", help="a good earlier run: regressions become findings")
    report.add_argument("--force", action="store_true",
                        help="with --baseline: compare even when the runs' profiles, engines or layouts differ")
    report.add_argument("-o", "--output", metavar="FILE", help="where to write the HTML (default: RUN_DIR/report.html)")
    report.add_argument("--drain", action="store_true", help="execute the scontrol drain lines (default: print them)")
    report.add_argument("--prometheus", metavar="FILE",
                        help="also write the verdict, findings and per-NIC / per-rail / collective medians in "
                             "node_exporter's textfile format (replaced atomically); point node_exporter's "
                             "--collector.textfile.directory at the folder and name the file *.prom, e.g. "
                             "/var/lib/node_exporter/textfile/acceptance.prom")
    report.set_defaults(func=cmd_report)

    compare = sub.add_parser(
        "compare", help="per-metric, per-link changes of a run against a baseline run",
        description="Median of each metric per link (and size, rail) in RUN_DIR against BASELINE_DIR; "
                    "worst changes first. A change for the worse beyond the profile's "
                    "analysis.regression_tolerance (default 5%%) is a regression; exit 1 if there is one.")
    compare.add_argument("run_dir", metavar="RUN_DIR")
    compare.add_argument("baseline_dir", metavar="BASELINE_DIR")
    compare.add_argument("--top", type=_positive, default=20, metavar="N", help="rows to show (default 20)")
    compare.add_argument("--force", action="store_true",
                         help="compare even runs judged by different profiles, engines or node/rail layouts "
                              "(otherwise exit 2 naming what differs); the differences are printed first")
    compare.set_defaults(func=cmd_compare)

    doctor = sub.add_parser("doctor", help="what this machine offers: MPI, launcher, Slurm, RDMA, GPUs, NCCL")
    doctor.set_defaults(func=cmd_doctor)

    profiles = sub.add_parser("profiles", help="list the built-in profiles, or show one resolved",
                              description="`acceptance profiles` lists the built-in profiles; "
                                          "`acceptance profiles show NAME|PATH` prints one with every "
                                          "value resolved (defaults filled, units normalized).")
    profiles.add_argument("action", nargs="?", choices=["show"])
    profiles.add_argument("name", nargs="?", metavar="NAME|PATH")
    profiles.add_argument("--names", action="store_true", help="only the built-in names, one per line")
    profiles.set_defaults(func=cmd_profiles)

    plan = sub.add_parser(
        "plan", help="rounds, pair measurements and estimated duration for a cluster size",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Count what the pairwise RDMA-write suite would measure on N nodes x R rails, "
                    "estimate how long it takes, and check that its longest step fits the hang timeout. "
                    "Runs nothing.",
        epilog="A round is a set of disjoint node pairs (no node twice), all measured at the same time;\n"
               "each pair is measured in both directions, one after the other. Rounds run one after\n"
               "another, and rails one after another (one pytest test per rail, same schedule on each).\n\n"
               "The hang timeout bounds a step, not a test: a round of pairs, a size of a collective sweep.\n"
               "When the longest step cannot fit the profile's run.hang_timeout, plan exits 2 saying which.\n\n"
               "patterns:\n"
               "  all-pairs  every node pair: N-1 rounds for even N, N for odd N (one node idle per round)\n"
               "  sample:K   K rounds of the all-pairs schedule, spread across it, so each node gets K\n"
               "             partners at varied distances; for very large clusters\n\n"
               "examples:\n"
               "  acceptance plan --nodes 2048 --rails 8\n"
               "  acceptance plan --nodes 2048 --rails 8 --pattern sample:16 --rate 400Gbit/s\n")
    plan.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes in the cluster (>= 2)")
    plan.add_argument("--rails", type=int, required=True, metavar="R", help="rails (NICs) per node (>= 1)")
    plan.add_argument("--pattern", metavar="all-pairs|sample:K",
                      help="node pairs per rail (default: the profile's rdma_write.pattern, all-pairs)")
    plan.add_argument("--profile", metavar="NAME|PATH",
                      help="profile whose sweep and latency settings time the estimate (default: local)")
    plan.add_argument("--rate", metavar="RATE",
                      help='link rate for the estimate, e.g. "400Gbit/s" (default: the profile\'s '
                           "rdma_write.bandwidth_min at its largest size, else 100Gbit/s)")
    plan.set_defaults(func=cmd_plan)

    counters = sub.add_parser(
        "counters", help="RDMA port counters before and after a job: snapshot, then diff",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read every RDMA port's counters on this node (sysfs counters/ and hw_counters/, and\n"
                    "`ethtool -S` on RoCE ports) into a JSON snapshot; diff two snapshots of one node to see\n"
                    "what rose in between, judged against the profile's [counters] bounds.",
        epilog="around a training job (one snapshot per node; %N is the node name):\n"
               "  srun --ntasks-per-node=1 acceptance counters snapshot -o before-%N.json\n"
               "  srun python train.py ...\n"
               "  srun --ntasks-per-node=1 acceptance counters snapshot -o after-%N.json\n"
               "  acceptance counters diff before-node1.json after-node1.json\n\n"
               "what a diff judges (bounds from the profile's [counters] section):\n"
               "  error     symbol_error, link_downed, rx_crc_errors_phy, retry_exceeded_err, ...: must not rise\n"
               "            (errors_max); one saturated at its cap during the window fails too\n"
               "  retransmit out_of_sequence, local_ack_timeout_err, duplicate_request, ...: per million of\n"
               "            the port's packets in the window, fail above retransmit_ppm_max (0)\n"
               "  discard   port_xmit_discards, rx_discards_phy, out_of_buffer, ...: warn above discards_max\n"
               "  pause     PFC pause frames per second: warn above pause_rate_max (when set)\n"
               "  cnp       CNP / ECN marks per second: warn above cnp_rate_max (when set)\n"
               "PMA counters clamp instead of wrapping (symbol_error stops at 65535): a saturated counter\n"
               "hides every later rise, so clear it (perfquery -R -C mlx5_0 -P 1).\n\n"
               "environment: ACCEPTANCE_SYSFS_ROOT (default /sys), ACCEPTANCE_ETHTOOL (default ethtool,\n"
               "e.g. \"sudo -n ethtool\")\n"
               "exit codes (diff): 0 nothing failed, 1 an error counter rose, 2 bad input")
    csub = counters.add_subparsers(dest="action", required=True, metavar="ACTION")
    snap = csub.add_parser(
        "snapshot", help="write this node's port counters as JSON",
        description="Read every port of every RDMA device on this node and write the counters as JSON "
                    "(format acceptance-counters/1) to FILE or stdout. What cannot be read (no devices, "
                    "no ethtool, unreadable files) is listed under \"problems\", never an error.")
    snap.add_argument("-o", "--output", metavar="FILE",
                      help="write here, atomically (default: stdout); %%N becomes the node name, "
                           "so one srun command writes one file per node")
    snap.add_argument("--no-ethtool", action="store_true",
                      help="sysfs only: skip `ethtool -S` on RoCE ports (pause, PHY and drop counters)")
    snap.set_defaults(func=cmd_counters_snapshot)
    cdiff = csub.add_parser(
        "diff", help="what rose between two snapshots of one node, judged against the profile",
        description="Compare two snapshots of the same node: a table of the counters that moved, then one "
                    "line per problem naming node, device and port. Exit 1 when an error counter rose "
                    "(or saturated), 0 otherwise (warnings included), 2 for unusable input.")
    cdiff.add_argument("before", metavar="BEFORE", help="snapshot taken before the window")
    cdiff.add_argument("after", metavar="AFTER", help="snapshot of the same node taken after it")
    cdiff.add_argument("--json", action="store_true",
                       help='print {"node", "seconds", "deltas", "problems", "notes", "verdict"} as JSON')
    cdiff.add_argument("--profile", metavar="NAME|PATH",
                       help="profile whose [counters] bounds apply (default: local)")
    cdiff.set_defaults(func=cmd_counters_diff)
    return p


def _seconds(text: str) -> float:
    from ..spec.profile import positive_seconds
    try:
        return positive_seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


# ---- doctor / profiles ---------------------------------------------------

def cmd_doctor(args) -> int:
    from .doctor import format_report, probe_all
    print(format_report(probe_all()))
    return EXIT_OK


def cmd_profiles(args) -> int:
    if args.names:
        from ..spec.profile import builtin_names
        print("\n".join(builtin_names()))
        return EXIT_OK
    if args.action is None:
        print(format_profile_list())
        print("\nshow one: acceptance profiles show NAME   (or a path to your own .toml)")
        return EXIT_OK
    if not args.name:
        raise UsageError("profiles show needs a profile name or path")
    print(format_profile(load_profile(args.name)))
    return EXIT_OK


# ---- plan ------------------------------------------------------------------

def cmd_plan(args) -> int:
    from .plan import choose_rate, plan_text, step_problem
    profile = load_profile(args.profile)
    try:
        print(plan_text(args.nodes, args.rails, args.pattern, profile, args.rate))
        problem = step_problem(profile, choose_rate(profile, args.rate)[0])
    except ValueError as e:
        raise UsageError(str(e)) from None
    if problem:
        raise UsageError(problem)
    return EXIT_OK


# ---- counters ----------------------------------------------------------------

def cmd_counters_snapshot(args) -> int:
    import json

    from ..host.counters import snapshot
    snap = snapshot(ethtool=not args.no_ethtool)
    text = json.dumps(snap, indent=1) + "\n"
    where = "stdout"
    if args.output:
        target = Path(args.output.replace("%%", "\0").replace("%N", snap["node"]).replace("\0", "%"))
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, target)
        except OSError as e:
            if tmp.parent.is_dir():
                tmp.unlink(missing_ok=True)
            raise UsageError(f"{target}: cannot write the snapshot: {e.strerror or e}") from None
        where = str(target)
    else:
        sys.stdout.write(text)
    counted = sum(len(p["counters"]) for p in snap["ports"])
    print(f"acceptance: counters snapshot of {snap['node']}: {len(snap['ports'])} ports, {counted} counters, "
          f"{len(snap['problems'])} problems -> {where}", file=sys.stderr)
    for line in snap["problems"]:
        print(f"  problem: {line}", file=sys.stderr)
    return EXIT_OK


def cmd_counters_diff(args) -> int:
    import json

    from ..host import counters as ctr
    from ..spec import counter_verdicts as cv
    try:
        before, after = ctr.load_snapshot(args.before), ctr.load_snapshot(args.after)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if before["node"] != after["node"]:
        raise UsageError(f"{args.before} is from node {before['node']} but {args.after} from node "
                         f"{after['node']}: diff two snapshots of the same node")
    limits = cv.Limits.from_profile(load_profile(args.profile))
    try:
        deltas = ctr.diff(before, after)
    except (ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{args.before}, {args.after}: malformed snapshot ({type(e).__name__}: {e})") from None
    verdict = cv.verdict_of(deltas, limits)
    if args.json:
        print(json.dumps({"node": deltas.node, "seconds": deltas.seconds, "deltas": ctr.deltas_json(deltas),
                          "problems": cv.problems(deltas, limits, deltas.node), "notes": deltas.notes,
                          "verdict": verdict}, indent=1))
    else:
        print(cv.format_diff(deltas, limits, deltas.node))
        print(f"verdict: {verdict.upper()}")
    return EXIT_FAILED if verdict == "fail" else EXIT_OK


# ---- report / compare ------------------------------------------------------

def _run_dir(path: str) -> Path:
    folder = Path(path)
    for needed in ("run.json", "results.jsonl"):
        if not (folder / needed).is_file():
            raise UsageError(f"{folder}: not a run folder ({needed} missing)")
    return folder


def cmd_report(args) -> int:
    from .postrun import analyze_and_report, execute_drains, summary
    folder = _run_dir(args.run_dir)
    baseline = _run_dir(args.baseline) if args.baseline else None
    if baseline is not None:
        _comparable(folder, baseline, args.force)
    if args.prometheus:  # checked before the analysis, which can take minutes
        from ..export.prometheus import path_problem
        problem = path_problem(args.prometheus)
        if problem:
            raise UsageError(f"--prometheus: {problem}")
        if not args.prometheus.endswith(".prom"):
            print(f"acceptance: note: node_exporter's textfile collector reads only *.prom files, "
                  f"not {Path(args.prometheus).name}", file=sys.stderr)
    try:
        analysis, report = analyze_and_report(folder, baseline, args.output)
    except InputError as e:
        raise UsageError(str(e)) from None
    print(summary(analysis, report))
    if args.prometheus:
        from ..export.prometheus import write
        try:
            print(f"prometheus: {write(analysis, args.prometheus)}")
        except OSError as e:
            raise UsageError(f"--prometheus {args.prometheus}: cannot write: {e.strerror or e}") from None
    if args.drain:
        execute_drains(analysis.drains)
    return analysis.exit_code


def _comparable(run_dir: Path, baseline_dir: Path, force: bool) -> None:
    """UsageError naming what differs between two runs, unless forced (then the differences are printed)."""
    from ..records.comparable import differences
    from ..records.results import read_json
    try:
        found = differences(read_json(run_dir / "run.json"), read_json(baseline_dir / "run.json"))
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not found:
        return
    lines = "\n".join(f"  {line}" for line in found)
    if not force:
        raise UsageError(f"{run_dir} and the baseline {baseline_dir} are not comparable:\n{lines}\n"
                         "(--force compares them anyway)")
    print(f"acceptance: comparing anyway (--force), although:\n{lines}")


def cmd_compare(args) -> int:
    from ..analysis import analyze
    run_dir, baseline_dir = _run_dir(args.run_dir), _run_dir(args.baseline_dir)
    _comparable(run_dir, baseline_dir, args.force)
    try:
        analysis = analyze(run_dir, baseline_dir=baseline_dir)
    except InputError as e:
        raise UsageError(str(e)) from None
    deltas = analysis.deltas
    if deltas is None or deltas.empty:
        print("no metric in common with the baseline")
        return EXIT_OK
    worst = deltas.sort_values("change").head(args.top)
    print(f"{len(deltas)} metrics compared with {args.baseline_dir}; "
          f"{int(deltas['regression'].sum())} regressions; worst {len(worst)} first:")
    for row in worst.itertuples():
        link = f"{row.src} -> {row.dst}" if isinstance(row.dst, str) and row.dst else f"{row.src}"
        rail = "" if row.rail is None or row.rail != row.rail else f" rail {int(row.rail)}"
        size = "" if row.size is None or row.size != row.size else f" {int(row.size)} B"
        flag = "  REGRESSION" if row.regression else ""
        print(f"  {row.suite} {row.metric}{size}{rail} {link}: {row.value:.4g} vs {row.baseline:.4g} "
              f"({row.change:+.1%}){flag}")
    return EXIT_FAILED if deltas["regression"].any() else EXIT_OK


# ---- run -------------------------------------------------------------------

def cmd_run(args) -> int:
    if args.profile == "auto":
        from ..spec.autoprofile import choose
        profile, why = choose()
        print(f"acceptance: {why}", flush=True)
    else:
        profile = load_profile(args.profile)
    pytest_args = list(args.pytest_args)
    if pytest_args and pytest_args[0] == "--":
        pytest_args = pytest_args[1:]
    try:
        launcher = launch.resolve(args.launcher)
    except launch.LaunchError as e:
        raise UsageError(str(e)) from None
    nodes = args.nodes or profile.get("run.nodes")
    per_node = args.ranks_per_node or profile.get("run.ranks_per_node")
    folder = RunFolder.create(args.output or Path.cwd() / "reports")

    try:
        cmd, env, what = launcher.command(nodes, per_node)
    except launch.LaunchError as e:
        raise UsageError(str(e)) from None
    cmd += ["-m", "pytest", "-p", "acceptance.runtime.pytest_plugin", "-p", "no:cacheprovider",
            "--run-dir", str(folder.path), "--profile", profile.source]
    if args.hang_timeout:
        cmd += ["--hang-timeout", str(args.hang_timeout)]
    if not any(_is_path(a) for a in pytest_args):
        cmd.append(str(_suites_path(args.suites)))
    cmd += pytest_args
    env["PYTHONHASHSEED"] = "0"  # every rank must collect the same tests in the same order
    env["ACCEPTANCE_COMMAND"] = shlex.join(["acceptance", *args.argv])

    print(f"acceptance: {what}, profile {profile.name}", flush=True)
    print(f"acceptance: run folder {folder.path}", flush=True)
    # Once the ranks agreed on the exit code, each bounds its own end by the hang timeout plus
    # END_GRACE_S; the launcher gets that and a little more to exit.
    end_bound = (args.hang_timeout or profile.get("run.hang_timeout")) + END_GRACE_S + LAUNCHER_GRACE_S
    code = _burn_in(cmd, env, folder, args.iterations, args.duration, end_bound)
    if code in (EXIT_OK, EXIT_FAILED):
        # The verdict decides: a pass needs measurements in bounds.
        code = _post_run(folder, args.drain, report=not args.no_report)
    elif code == EXIT_INCOMPLETE and folder.results.exists():
        _post_run(folder, drain=False, report=not args.no_report)  # what was measured before the loss too
    print(f"acceptance: exit {code} ({_WORDS[code]})")
    print(f"run folder: {folder.path}")
    return code


def _burn_in(cmd: list[str], env: dict, folder: RunFolder, iterations: int | None,
             duration: float | None, end_bound: float) -> int:
    """Launch the suites once, or repeatedly for a burn-in; the worst exit code wins."""
    start = time.monotonic()
    codes: list[int] = []
    while True:
        k = len(codes)
        env[ENV_ITERATION] = str(k)
        lost: list = []
        rc, overran = _run_child(cmd, env, lost, folder, end_bound)
        code = _final_code(folder, rc, overran, lost)
        codes.append(code)
        if code == EXIT_INCOMPLETE:
            _record_lost(folder, lost)
            print(f"acceptance: run INCOMPLETE (launcher exit {rc}); see {folder.path}/run.json and logs/",
                  file=sys.stderr)
        elapsed = time.monotonic() - start
        done = (code in (EXIT_USAGE, EXIT_INCOMPLETE) or (iterations is None and duration is None)
                or (iterations is not None and len(codes) >= iterations)
                or (duration is not None and elapsed >= duration))
        if iterations or duration:
            if iterations:
                left = elapsed / len(codes) * (iterations - len(codes))
                of = f"/{iterations}"
            else:
                left, of = max(0.0, duration - elapsed), ""
            print(f"acceptance: burn-in iteration {len(codes)}{of} done (exit {code}), "
                  f"elapsed {_duration(elapsed)}, remaining {'0 s' if done else '~' + _duration(left)}", flush=True)
        if done:
            break
    final = max(codes)
    if len(codes) > 1:
        folder.update_run(iterations=len(codes), exit_code=final, complete=final != EXIT_INCOMPLETE,
                          iteration_exit_codes=codes)
    return final


def _post_run(folder: RunFolder, drain: bool, report: bool = True) -> int:
    """Analysis and report; the run's verdict as an exit code (0 pass, 1 fail, 3 incomplete).

    Records the analysis refuses (analysis.validate: a node name that is not a Slurm node
    name, or not one of the run's) are an input error (2), with the file and line. A broken
    analysis or report never loses the results and never passes: the traceback is printed
    and the run counts as incomplete (3)."""
    from .postrun import analyze_and_report, execute_drains, summary
    try:
        analysis, written = analyze_and_report(folder.path, report=report)
    except InputError as e:  # records analysis refuses (a node name scontrol would misread): say which line
        print(f"acceptance: {e}", file=sys.stderr)
        print(f"acceptance: the run's results are in {folder.results}; nothing was analyzed", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # the results are on disk; say what broke, and do not call it a pass
        traceback.print_exc()
        print(f"acceptance: analysis or report failed (a harness error; results are in {folder.results}; "
              f"retry with `acceptance report {folder.path}`)", file=sys.stderr)
        return EXIT_INCOMPLETE
    if not (analysis.run or {}).get("complete", True):
        print()  # an aborted launcher leaves pytest's progress line unfinished
    print(summary(analysis, written, folder.path))
    if drain:
        execute_drains(analysis.drains)
    return analysis.exit_code


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m} min" if h else f"{m} min {s} s" if m else f"{s} s"


_WORDS = {EXIT_OK: "all checks passed", EXIT_FAILED: "a check failed",
          EXIT_USAGE: "usage or input error", EXIT_INCOMPLETE: "incomplete"}


def _is_path(arg: str) -> bool:
    return not arg.startswith("-") and os.path.exists(arg.split("::")[0])


def _suites_path(explicit: str | None) -> Path:
    for candidate in ([Path(explicit)] if explicit else [Path.cwd() / "suites", REPO / "suites"]):
        if candidate.exists():
            return candidate
    raise UsageError(f"suites not found at {explicit or 'suites/ (here or in the checkout)'}; "
                     f"give --suites PATH")


def _run_child(cmd: list[str], env: dict, lost: list | None = None, folder: RunFolder | None = None,
               end_bound: float | None = None) -> tuple[int, str | None]:
    """Run the launcher, passing its output through; srun's reports of dead tasks go into `lost`.

    Returns (exit status, why it was stopped): once run.json says the ranks ended, the launcher
    has `end_bound` seconds to exit, then its processes are killed."""
    ended_before = _run_end(folder)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True,
                            errors="replace", bufsize=1)

    def relay():
        for line in proc.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            m = SRUN_TASK_ERROR.search(line)
            if m and lost is not None:
                lost.append((m.group(1), m.group(2), m.group(3)))

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    ended_at = None
    try:
        while True:
            try:
                rc = proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            if end_bound is None:
                continue
            if ended_at is None and _run_end(folder) not in (None, ended_before):
                ended_at = time.monotonic()
            if ended_at is not None and time.monotonic() - ended_at > end_bound:
                _stop(proc)
                reader.join(timeout=10)
                return proc.returncode, (f"the launcher had not exited {end_bound:g} s after the ranks agreed on "
                                         f"the exit code (a rank stuck in teardown: junit.xml, NCCL, MPI_Finalize); "
                                         f"it was killed; see logs/")
        reader.join(timeout=10)
        return rc, None
    except KeyboardInterrupt:
        # Stop every rank, not just the launcher's foreground process.
        return _stop(proc, signal.SIGINT), None


def _stop(proc: subprocess.Popen, first: int = signal.SIGTERM) -> int:
    os.killpg(proc.pid, first)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def _run_end(folder: RunFolder | None):
    try:
        return folder.read_run().get("end") if folder is not None else None
    except (OSError, ValueError):
        return None


def _record_lost(folder: RunFolder, lost: list) -> None:
    """After srun tore a step down, name the node whose tasks died first (rank 0 may not have lived to)."""
    try:
        run = folder.read_run()
    except (OSError, ValueError):
        return
    if run.get("missing_ranks") or run.get("lost") or not lost:
        return
    node, tasks, how = lost[0]
    ranks = sorted(r for part in tasks.split(",") for r in _task_range(part))
    folder.update_run(missing_ranks=ranks, lost_nodes=[node],
                      lost=f"srun: tasks {tasks} on {node} ended first ({how}); Slurm then stopped the step")
    print(f"acceptance: lost node {node}: tasks {tasks} ended first ({how})", file=sys.stderr)


def _task_range(part: str) -> range:
    low, _, high = part.partition("-")
    return range(int(low), int(high or low) + 1)


def _final_code(folder: RunFolder, rc: int, overran: str | None = None, lost: list | None = None) -> int:
    """The run's exit code (docs/pytest-under-mpi.md): run.json's, unless the launcher tells of a rank
    that crashed or hung after the ranks agreed: then the run is incomplete, and run.json says why.

    Launchers stop every rank when one exits non-zero (srun --kill-on-bad-exit, Hydra), so after an
    agreed 1 or 2 their own status is expected to differ; only srun's report of the first tasks to
    end (`lost`) tells a crash apart there."""
    try:
        run = folder.read_run()
    except (OSError, ValueError):
        # No run.json: the job stopped before rank 0 started (bad profile, bad arguments, crash).
        return EXIT_USAGE if rc in (EXIT_USAGE, 4) else EXIT_INCOMPLETE
    if not run.get("complete"):
        return EXIT_INCOMPLETE
    code = run.get("exit_code")
    if code not in _WORDS:
        return EXIT_INCOMPLETE
    first = lost[0][2] if lost else None
    if code == EXIT_OK:
        crashed = rc != EXIT_OK
    else:
        crashed = first is not None and first != f"Exited with exit code {code}"
    if overran is None and not crashed:
        return code
    why = overran or (f"the launcher exited {rc} after the ranks agreed on exit {code}"
                      + (f" (srun: the first tasks to end: {first})" if first else "")
                      + ": a rank crashed or hung after the results were in (junit.xml, NCCL teardown, "
                        "MPI_Finalize); see logs/")
    folder.update_run(complete=False, exit_code=EXIT_INCOMPLETE, launcher_exit_code=rc, lost=why)
    print(f"acceptance: {why}", file=sys.stderr)
    return EXIT_INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
