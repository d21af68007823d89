"""`acceptance run`: start the ranks, run the suites (once, or as a burn-in), end the run folder, judge it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path

from . import attempts, launch, plan
from . import lost as lost_reports
from .common import EPILOG, EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, UsageError, positive, seconds
from ..host import switchports
from ..records.results import ENV_ITERATION, InputError, RunFolder, utc_now
from ..runtime import status
from ..runtime.resume import ENV_RESUME
from ..records.naming import compress_ints
from ..runtime.watchdog import END_GRACE_S
from ..rules import switches
from ..rules.profile import load_profile
from ..rules.units import human_seconds


def add_parser(sub) -> None:
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
               "A lost node (a rank killed, its node down, its ranks alone hung) is named, drained and left\n"
               "behind: what was left runs again on the other nodes, in the same run folder and allocation\n"
               "(srun --exclude; local: without that virtual node; not with mpirun), at most run.attempts\n"
               "launches (2) and while no more than run.lost_max of the nodes (0.2) are lost. Rank 0 prints\n"
               "every 20 s how far the run is, and keeps it in the run folder's status.json.\n\n"
               "Anything after -- goes to pytest, e.g. -- -m 'preflight or rail' -x\n" + EPILOG)
    run.add_argument("--profile", metavar="NAME|PATH|auto",
                     help="thresholds profile: a built-in name (acceptance profiles), a TOML file, or auto: the "
                          "built-in matching this node's GPUs and RDMA port rate (default: local, which only "
                          "checks that the harness works)")
    run.add_argument("--launcher", choices=["auto", *launch.LAUNCHERS], default="auto")
    run.add_argument("--nodes", type=positive, metavar="N", help="nodes (local: virtual nodes)")
    run.add_argument("--ranks-per-node", type=positive, metavar="R",
                     help="ranks per node = rails per node (one rank per GPU and NIC)")
    run.add_argument("--output", metavar="DIR", default=None,
                     help="folder that receives the run folder (default: ./reports)")
    run.add_argument("--topology", metavar="PATH",
                     help="the cluster's switch tree, so findings can name a leaf switch or an uplink: Slurm's "
                          "topology.conf or topology.yaml, an ibnetdiscover output, or a folder of per-rail "
                          "rail<N>* ibnetdiscover outputs (default: $ACCEPTANCE_TOPOLOGY, else the profile's "
                          "topology.switches); kept in run.json")
    run.add_argument("--routes", metavar="PATH",
                     help="the fabric's forwarding tables, so a slow switch-to-switch cable is named with both "
                          "ends: ibroute or dump_lfts.sh output, ibdiagnet2.fdbs, or a folder of them, followed over "
                          "the --topology ibnetdiscover cabling (default: $ACCEPTANCE_ROUTES, else the profile's "
                          "topology.routes); run.json keeps their digest")
    run.add_argument("--hang-timeout", type=seconds, metavar="SECONDS",
                     help="how long the job may go without progress on any rank before the ranks that did not "
                          "reach the sync point are reported as HANG; it bounds one step of a test (a round of "
                          "pairs, a size of a sweep), not the test; > 0: seconds or a duration like 10min "
                          "(default: the profile's run.hang_timeout)")
    run.add_argument("--budget", type=plan.budget_arg, metavar="DURATION",
                     help="time the whole acceptance may take, e.g. 30m, 45min, 1h (default: the profile's "
                          "run.budget; the hardware profiles set 30min): before launching anything, exit 2 "
                          "when `acceptance plan`'s estimate exceeds it or the Slurm job's time left, naming "
                          "what to change; rdma_write.pattern \"auto\" screens to fit it")
    burn = run.add_mutually_exclusive_group()
    burn.add_argument("--iterations", type=positive, metavar="K",
                      help="burn-in: run the selected suites K times; records carry `iteration`")
    burn.add_argument("--duration", type=seconds, metavar="SEC",
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


REPO = Path(__file__).resolve().parents[2]
LAUNCHER_GRACE_S = 30.0  # beyond the ranks' own bound on their end, for the launcher to notice and exit
LAUNCHER_TAIL_CHUNKS = 16  # the launcher's last reads (64 KiB at most each) kept for its report of the first ranks to die


def cmd_run(args) -> int:
    if args.profile == "auto":
        from ..rules.autoprofile import choose
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
    tree, routes = _switch_tree(profile, args.topology, args.routes)
    limit, estimate = _check_budget(profile, launcher.name, nodes, per_node, args.budget, args.iterations, args.duration)
    folder = RunFolder.create(args.output or Path.cwd() / "reports")

    try:
        _, _, what = launcher.command(nodes, per_node)
    except launch.LaunchError as e:
        raise UsageError(str(e)) from None
    cmd = ["-m", "pytest", "-p", "acceptance.runtime.pytest_plugin", "-p", "no:cacheprovider",
            "--run-dir", str(folder.path), "--profile", profile.source]
    if args.hang_timeout:
        cmd += ["--hang-timeout", str(args.hang_timeout)]
    if tree is not None:
        cmd += ["--topology", str(tree)]
    if routes is not None:
        cmd += ["--routes", str(routes)]
    if not any(_is_path(a) for a in pytest_args):
        cmd.append(str(_suites_path(args.suites)))
    cmd += pytest_args
    env = {"PYTHONHASHSEED": "0"}  # every rank must collect the same tests in the same order
    if limit is not None:  # the ranks resolve rdma_write.pattern "auto" against the limit checked here
        env[plan.ENV_BUDGET] = repr(limit)
    env["ACCEPTANCE_COMMAND"] = shlex.join(["acceptance", *args.argv])

    print(f"acceptance: {what}, profile {profile.name}", flush=True)
    print(f"acceptance: run folder {folder.path}", flush=True)
    # Once the ranks agreed on the exit code, each bounds its own end by the hang timeout plus
    # END_GRACE_S; the launcher gets that and a little more to exit.
    end_bound = (args.hang_timeout or profile.get("run.hang_timeout")) + END_GRACE_S + LAUNCHER_GRACE_S
    # The switch ports' own counters, around the run, walked from this host's InfiniBand ports (a RoCE or
    # emulated fabric has no subnet management to walk it with: nothing is read, nothing said).
    walk_from = switchports.fabric_ports()
    _switch_ports(folder, "before", walk_from)
    launches = LaunchPass(launcher, nodes, per_node, cmd, env, folder, end_bound, profile, estimate)
    code = _burn_in(launches, folder, args.iterations, args.duration)
    _switch_ports(folder, "after", walk_from)
    if code in (EXIT_OK, EXIT_FAILED):
        # The verdict decides: a pass needs measurements in bounds.
        code = post_run(folder, args.drain, report=not args.no_report)
    elif code == EXIT_INCOMPLETE and folder.results.exists():
        post_run(folder, drain=False, report=not args.no_report)  # what was measured before the loss too
    print(f"acceptance: exit {code} ({_WORDS[code]})")
    print(f"run folder: {folder.path}")
    return code


def _switch_ports(folder: RunFolder, when: str, walk_from: list) -> None:
    """Snapshot the switch ports' counters into the run folder (docs/rdma.md §5, "Switch ports"); the
    analysis diffs before and after. Never fails the run: what cannot be read is said."""
    if walk_from:
        for line in switchports.summary(switchports.take(folder.path, when, walk_from)):
            print(f"acceptance: {when} the run: {line}", flush=True)


def _burn_in(launch_pass: "LaunchPass", folder: RunFolder, iterations: int | None,
             duration: float | None) -> int:
    """Launch the suites once, or repeatedly for a burn-in; the worst exit code wins."""
    start = time.monotonic()
    codes: list[int] = []
    while True:
        code = launch_pass(len(codes))
        codes.append(code)
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
                  f"elapsed {human_seconds(elapsed)}, remaining {'0 s' if done else '~' + human_seconds(left)}", flush=True)
        if done:
            break
    final = max(codes)
    if len(codes) > 1:
        folder.update_run(iterations=len(codes), exit_code=final, complete=final != EXIT_INCOMPLETE,
                          iteration_exit_codes=codes)
    return final


class LaunchPass:
    """One pass of the suites: a launch, and where a node is lost, launches of what is left on the nodes
    that survive (acceptance.cli.attempts), each bounded like the first. Nodes lost in one pass of a
    burn-in stay out of the passes after it."""

    def __init__(self, launcher: launch.Launcher, nodes: int, per_node: int, tail: list[str], env: dict,
                 folder: RunFolder, end_bound: float, profile, estimate: float | None = None):
        self.launcher, self.nodes, self.per_node, self.tail = launcher, nodes, per_node, tail
        self.env, self.folder, self.end_bound, self.profile = env, folder, end_bound, profile
        self.estimate = estimate  # the plan's, of one pass: the ranks say how much of it is left
        self.excluded: tuple[str, ...] = ()

    def __call__(self, iteration: int) -> int:
        attempt, resume, began = 1, None, time.monotonic()
        cmd, env, _ = self.launcher.command(self.nodes, self.per_node, self.excluded)
        cmd, env = cmd + self.tail, {**env, **self.env}
        while True:
            env = {**env, ENV_ITERATION: str(iteration)}
            env.pop(ENV_RESUME, None)
            if resume is not None:
                env[ENV_RESUME] = str(resume)
            if self.estimate is not None:
                env[status.ENV_ESTIMATE] = repr(max(0.0, self.estimate - (time.monotonic() - began)))
            started = utc_now()
            code, rc = self._launch(cmd, env)
            if code != EXIT_INCOMPLETE:
                _salvage(self.folder, iteration)  # nothing, unless a test's records never landed
                if attempt > 1:
                    attempts.record_launch(self.folder, attempt, started, utc_now(), again=False, iteration=iteration)
                return code
            run = _read_run(self.folder)
            decision = attempts.decide(run, attempt, self.profile, iteration) if run else None
            if decision is not None and decision.again:
                try:  # before anything is set aside: a launcher that cannot leave the node out (mpirun)
                    cmd, env, what = self.launcher.command(self.nodes, self.per_node, decision.lost)
                    cmd, env = cmd + self.tail, {**env, **self.env}
                except launch.LaunchError as e:
                    decision = dataclasses.replace(decision, again=False, why=f"not launching again: {e}")
            cut = attempts.Cut() if decision is not None and decision.again else None
            _salvage(self.folder, iteration, cut)
            if cut is None:
                if decision is not None and decision.lost:
                    print(f"acceptance: {decision.why}", file=sys.stderr, flush=True)
                if attempt > 1:
                    attempts.record_launch(self.folder, attempt, started, utc_now(), again=False, iteration=iteration)
                print(f"acceptance: run INCOMPLETE (launcher exit {rc}); see {self.folder.path}/run.json and logs/",
                      file=sys.stderr)
                return code
            print(f"acceptance: {decision.why}", flush=True)
            attempts.set_aside_failures(self.folder, cut.tests)
            self._keep_launch_files(attempt)
            run = attempts.record_launch(self.folder, attempt, started, utc_now(), again=True, iteration=iteration)
            resume = attempts.write_resume(self.folder, run, attempt + 1, iteration, decision, cut)
            self.excluded = decision.lost
            print(f"acceptance: {what}", flush=True)
            attempt += 1

    def _launch(self, cmd: list[str], env: dict) -> tuple[int, int]:
        """One launch: (its exit code, the launcher's own status)."""
        lost: list = []
        # Every rank here: which ended first is seen directly (acceptance.cli.lost.DeathWatch).
        watch = lost_reports.DeathWatch() if self.launcher.here else None
        rc, overran = run_child(cmd, {**env, **watch.env()} if watch else env, lost, self.folder, self.end_bound)
        watched = watch.lost() if watch else None
        code = final_code(self.folder, rc, overran, lost)
        if code == EXIT_INCOMPLETE:
            _record_lost(self.folder, lost_reports.first_of(lost, watched))
        return code, rc

    def _keep_launch_files(self, attempt: int) -> None:
        """A relaunch writes junit.xml and the ranks' logs anew: the launch before keeps its own (its hang's
        stacks among them) in logs/launch<k>/."""
        kept = self.folder.path / "logs" / f"launch{attempt}"
        kept.mkdir(parents=True, exist_ok=True)
        for path in [self.folder.junit, *(self.folder.path / "logs").glob("rank-*.log")]:
            if path.exists():
                os.replace(path, kept / path.name)


def _salvage(folder: RunFolder, iteration: int, cut: "attempts.Cut | None" = None) -> None:
    """The records of a test in flight when the job ended (a rank lost, a hang, a stop): what each rank
    had measured of it, kept in results.jsonl (RunFolder.salvage) and said in run.json. With `cut` (a
    relaunch follows), the rounds that had not ended are set aside, to be measured again."""
    kept, ranks = folder.salvage(cut)
    folder.drop_staged()  # what rank 0 had staged of that test is in the spill files too
    if kept:
        print(f"acceptance: kept {kept:,} records of the test in flight from {ranks} rank(s) "
              f"(what they had measured of it when the job ended)", flush=True)
        salvaged = folder.read_run().get("salvaged") or []
        folder.update_run(salvaged=[*salvaged, {"iteration": iteration, "records": kept, "ranks": ranks}])


def post_run(folder: RunFolder, drain: bool, report: bool = True) -> int:
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


def _check_budget(profile, launcher: str, nodes: int, per_node: int, budget: str | None,
                  iterations: int | None = None, duration: float | None = None) -> tuple[float | None, float | None]:
    """Before anything starts: exit 2 (UsageError) when the plan's estimate of the whole acceptance exceeds
    the budget or the Slurm job's time left, or a burn-in (every pass, or its duration and one more pass)
    cannot end within the job; (the limit of one pass in seconds (None: no limit), the plan's estimate of
    one pass (None: nothing pairwise to plan))."""
    if launcher == "srun":  # the allocation's nodes and tasks, as Srun.command launches them
        nodes = int(os.environ.get("SLURM_JOB_NUM_NODES") or nodes)
        per_node = int(re.match(r"\d+", os.environ.get("SLURM_NTASKS_PER_NODE") or str(per_node))[0])
    rails = profile.get("topology.rails") or per_node
    if nodes < 2:
        return None, None  # nothing pairwise to plan; the suites skip what needs two nodes
    checked = plan.check_before_run(profile, nodes, rails, budget)
    left, one = checked["slurm_seconds_left"], checked["estimated_seconds"]
    burn = one * iterations if iterations else duration + one if duration else None
    if burn and left is not None and burn > left:
        what = f"--iterations {iterations}" if iterations else f"--duration {human_seconds(duration)}"
        raise UsageError(f"the burn-in ({what}, about {human_seconds(one)} a pass) needs about "
                         f"{human_seconds(burn)}, more than the Slurm job's time left "
                         f"({human_seconds(left)}): fewer iterations, a shorter --duration, or a longer "
                         f"allocation (--time)")
    if checked["limit_seconds"] is not None:
        print(f"acceptance: plan {human_seconds(checked['estimated_seconds'])} with {checked['pattern']} "
              f"(rails {checked['rail_mode']}), within {checked['limit_from']} "
              f"({human_seconds(checked['limit_seconds'])})", flush=True)
    return checked["limit_seconds"], checked["estimated_seconds"]


def _switch_tree(profile, topology: str | None, routes: str | None) -> tuple[Path | None, Path | None]:
    """The switch tree's path and the routes' for the ranks, read here first so a bad file stops the run
    before it starts (exit 2: file, line, why)."""
    path = switches.switches_path(profile, topology)
    tables = switches.routes_path(profile, routes)
    if path is None and tables is None:
        return None, None
    try:  # routes without a tree to follow them on are refused here, before any rank starts
        fabric = switches.fabric_for(profile, path, tables)
    except InputError as e:
        raise UsageError(f"{'--routes' if routes and path is not None else '--topology'}: {e}") from None
    leaves = {leaf for t in fabric.trees.values() for leaf in t.leaves}
    print(f"acceptance: switch tree {path} ({fabric.format}: {len(fabric.nodes)} nodes on {len(leaves)} leaves)",
          flush=True)
    if fabric.routes is not None:
        print(f"acceptance: routes {fabric.routes.source} ({fabric.routes.format}: forwarding tables of "
              f"{len(fabric.routes.rails)} rail(s))", flush=True)
    for note in fabric.notes + (fabric.routes.notes if fabric.routes is not None else []):
        print(f"acceptance: switch tree: {note}", flush=True)  # what the readers set aside: the operator's to fix
    return path.resolve(), (tables if fabric.routes is not None else None)


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


def run_child(cmd: list[str], env: dict, lost: list | None = None, folder: RunFolder | None = None,
              end_bound: float | None = None) -> tuple[int, str | None]:
    """Run the launcher, passing its output through; its reports of the first ranks to die go into
    `lost` (acceptance.cli.lost: srun's as they come, Open MPI's and Hydra's from the output's end).

    Returns (exit status, why it was stopped): once run.json says the ranks ended, the launcher
    has `end_bound` seconds to exit, then its processes are killed."""
    ended_before = _run_end(folder)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # What the launcher printed last, for its report of the first ranks to die: Hydra writes it to
    # stdout, Open MPI and srun to stderr. Passed through as it comes (pytest's progress has no newline).
    tails = {"out": deque(maxlen=LAUNCHER_TAIL_CHUNKS), "err": deque(maxlen=LAUNCHER_TAIL_CHUNKS)}

    def relay(source, sink, tail: deque, lines: bool):
        out = getattr(sink, "buffer", None)
        pending = b""
        while chunk := os.read(source.fileno(), 65536):
            if out is not None:
                out.write(chunk)
                out.flush()
            else:
                sink.write(chunk.decode(errors="replace"))
                sink.flush()
            tail.append(chunk)
            if lines and lost is not None:  # srun's reports, one line each, as they come
                pending += chunk
                *complete, pending = pending.split(b"\n")
                lost.extend(found for line in complete
                            if (found := lost_reports.from_line(line.decode(errors="replace"))))

    readers = [threading.Thread(target=relay, args=(proc.stdout, sys.stdout, tails["out"], False), daemon=True),
               threading.Thread(target=relay, args=(proc.stderr, sys.stderr, tails["err"], True), daemon=True)]
    for reader in readers:
        reader.start()

    def drained() -> None:
        for reader in readers:
            reader.join(timeout=10)
        if lost is not None:
            for tail in tails.values():
                lost.extend(lost_reports.from_text(b"".join(tail).decode(errors="replace")))

    ended_at = None
    # The launcher runs in a session of its own (so a stop reaches every rank, not just its foreground
    # process), which a SIGTERM sent to us (timeout, systemd, a wrapper, scancel's first signal) does
    # not reach: pass it on, as Ctrl-C is.
    previous = (signal.signal(signal.SIGTERM, _terminated)
                if threading.current_thread() is threading.main_thread() else None)
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
                return proc.returncode, (f"the launcher had not exited {end_bound:g} s after the ranks agreed on "
                                         f"the exit code (a rank stuck in teardown: junit.xml, NCCL, MPI_Finalize); "
                                         f"it was killed; see logs/")
        return rc, None
    except KeyboardInterrupt:
        # Stop every rank, not just the launcher's foreground process.
        return _stop(proc, signal.SIGINT), None
    except Terminated:
        return _stop(proc, signal.SIGTERM), ("acceptance was sent SIGTERM: it stopped the MPI job (every rank); "
                                             "what the ranks recorded is kept")
    finally:
        drained()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Terminated(Exception):
    """SIGTERM arrived while the launcher ran."""


def _terminated(signum, frame):
    raise Terminated()


def _stop(proc: subprocess.Popen, first: int = signal.SIGTERM) -> int:
    os.killpg(proc.pid, first)
    try:
        return proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def _read_run(folder: RunFolder) -> dict:
    try:
        return folder.read_run()
    except (OSError, ValueError):  # not written yet, or being written
        return {}


def _run_end(folder: RunFolder | None):
    return _read_run(folder).get("end") if folder is not None else None


def _record_lost(folder: RunFolder, first: lost_reports.Lost | None) -> None:
    """After the launcher tore the job down, name the ranks and node that died first (rank 0 may not
    have lived to), unless the run already says why it ended (a hang, a stop)."""
    run = _read_run(folder)
    if not run or run.get("missing_ranks") or run.get("lost") or first is None:
        return
    ranks, nodes = lost_reports.resolve(first, run)
    if not ranks and not nodes:
        return
    which = f"rank{'s' if len(ranks) > 1 else ''} {compress_ints(ranks)}" if ranks else f"the process {first.pid}"
    where = f" on {', '.join(nodes)}" if nodes else (f" on host {first.host}" if first.host else "")
    why = f"{first.source}: {which}{where} ended first ({first.how}); the launcher then stopped the job"
    folder.update_run(missing_ranks=ranks, lost_nodes=nodes, lost=why)
    print(f"acceptance: lost {'node ' + ', '.join(nodes) if nodes else first.host or 'a rank'}: {which} ended first "
          f"({first.how})", file=sys.stderr)


def final_code(folder: RunFolder, rc: int, overran: str | None = None, lost: list | None = None) -> int:
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
        if overran:
            folder.update_run(lost=overran)
            print(f"acceptance: {overran}", file=sys.stderr)
        return EXIT_INCOMPLETE
    code = run.get("exit_code")
    if code not in _WORDS:
        return EXIT_INCOMPLETE
    first = lost[0] if lost else None
    if code == EXIT_OK:
        crashed = rc != EXIT_OK
    else:
        crashed = first is not None and first.exit_code != code
    if overran is None and not crashed:
        return code
    why = overran or (f"the launcher exited {rc} after the ranks agreed on exit {code}"
                      + (f" ({first.source}: the first to end: {first.how})" if first else "")
                      + ": a rank crashed or hung after the results were in (junit.xml, NCCL teardown, "
                        "MPI_Finalize); see logs/")
    folder.update_run(complete=False, exit_code=EXIT_INCOMPLETE, launcher_exit_code=rc, lost=why)
    print(f"acceptance: {why}", file=sys.stderr)
    return EXIT_INCOMPLETE
