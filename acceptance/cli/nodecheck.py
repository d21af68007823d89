"""`acceptance node-check`: this node's health in seconds (no MPI), and with --slurm its place in Slurm's
lifecycle: drain on a failure with a reason of our own, resume after passes only what we drained."""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError

ENV_STATE = "ACCEPTANCE_NODE_CHECK_STATE"
STATE_FORMAT = "acceptance-node-check/1"
EXIT_CODES = {"pass": EXIT_OK, "fail": EXIT_FAILED, "error": EXIT_USAGE}


def add_parser(sub) -> None:
    from ..rules.profile import NODE_CHECKS
    p = sub.add_parser(
        "node-check", help="this node's health in seconds (ports, counters, PCIe, GPUs, Xid); --slurm drains/resumes",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check this node alone, without MPI, within a deadline (node_check.deadline, 10 s):\n"
                    "  ports      every rail port ACTIVE at the profile's rate, MTU and link layer ([preflight])\n"
                    "  counters   port error counters since the last check ([counters] bounds)\n"
                    "  pcie       each RDMA NIC's and GPU's PCIe link at the width and speed it can train to\n"
                    "  memlock    RLIMIT_MEMLOCK against preflight.memlock_min\n"
                    "  gpudirect  nvidia_peermem loaded or dma-buf supported (GPU nodes)\n"
                    "  gpus       NVML: count, uncorrectable ECC, row remap pending/failed, retired pages,\n"
                    "             clocks held down by the hardware, temperature against the GPU's slowdown\n"
                    "  xid        NVIDIA Xid errors in the kernel log since the last check; one calling for a\n"
                    "             GPU reset, a reboot or an RMA fails every check until the node rebooted\n"
                    "A check whose hardware is absent skips and says why; one that cannot run (a tool missing,\n"
                    "its own error, the deadline) is an error, never a failure.\n\n"
                    "With --slurm (Slurm's HealthCheckProgram or a prolog: slurm/node-check.sh):\n"
                    "  fail   drain this node, reason \"acceptance: <check>: <part>: <detail>\"; a node drained\n"
                    "         by anyone else keeps its reason\n"
                    "  pass   after node_check.resume_after (2) passes in a row, resume the node if its reason\n"
                    "         is ours (starts \"acceptance:\", as run --drain's are too); never anyone else's\n"
                    "  error  leave the node as it is (our own trouble never drains a node)",
        epilog="exit codes: 0 healthy (warnings included), 1 a check failed, 2 a check could not run, or a usage\n"
               "            or profile error (with --slurm nothing is changed then)\n\n"
               "examples:\n"
               "  acceptance node-check                        one line per problem, then a summary\n"
               "  acceptance node-check --json                 for tools\n"
               "  acceptance node-check --profile h100-ndr400 --checks ports,pcie\n"
               "  HealthCheckProgram=/opt/acceptance/slurm/node-check.sh   (slurm.conf: slurm/node-check.conf)\n"
               "  acceptance node-check --forget xid           after a GPU reset: forget the Xid events kept\n\n"
               "state: one JSON file per node (the counters' last snapshot, the kernel log's cursor, Xids\n"
               "still calling for action, the passes in a row) in $ACCEPTANCE_NODE_CHECK_STATE, else\n"
               "/var/lib/acceptance/node-check (root) or ~/.local/state/acceptance/node-check")
    p.add_argument("--profile", metavar="NAME|PATH|auto",
                   help="thresholds profile (default: $ACCEPTANCE_PROFILE, else auto: the built-in matching this node)")
    p.add_argument("--checks", metavar="LIST", help=f"comma-separated, of {','.join(NODE_CHECKS)} "
                                                    "(default: the profile's node_check.checks)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout instead of lines")
    p.add_argument("--slurm", action="store_true", help="drain this node on a failure, resume it after passes")
    p.add_argument("--node", help="this node's Slurm name (default: $SLURMD_NODENAME, else the host name)")
    p.add_argument("--state", metavar="DIR", help=f"folder of the state files (default: ${ENV_STATE}, else "
                                                  "/var/lib/acceptance/node-check as root)")
    p.add_argument("--resume-after", type=int, metavar="N", help="passes in a row before a resume "
                                                                  "(default: the profile's node_check.resume_after)")
    p.add_argument("--forget", choices=NODE_CHECKS, metavar="CHECK",
                   help="drop what CHECK kept (xid: the Xid events still calling for action) and exit")
    p.set_defaults(func=main)


def state_dir(given: str | None) -> Path:
    if given or os.environ.get(ENV_STATE):
        return Path(given or os.environ[ENV_STATE])
    if os.geteuid() == 0:
        return Path("/var/lib/acceptance/node-check")
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "acceptance" / "node-check"


class StateFile:
    """One node's state, read and replaced under an exclusive lock (a health check and a prolog may
    overlap); a file another version or a crash left unreadable starts afresh."""

    def __init__(self, folder: Path, node: str, wait: float):
        self.path = folder / f"{node}.json"
        self.node = node
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._lock = open(folder / f".{node}.lock", "a")
        except OSError as e:
            raise UsageError(f"{folder}: cannot keep node-check's state there ({e.strerror or e}); name a "
                             f"writable folder with --state or ${ENV_STATE}") from None
        end = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise UsageError(f"{self.path}: another node-check holds its lock ({self._lock.name}); "
                                     f"nothing checked") from None
                time.sleep(0.1)
        try:
            data = json.loads(self.path.read_text())
            ok = isinstance(data, dict) and data.get("format") == STATE_FORMAT and data.get("node") == node
        except (OSError, ValueError):
            ok = False
        self.data = data if ok else {"format": STATE_FORMAT, "node": node, "checks": {}, "passes": 0}

    def save(self) -> None:
        self.data["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.path)
        except OSError as e:
            raise UsageError(f"{self.path}: cannot write node-check's state ({e.strerror or e}); nothing "
                             f"was changed on the node") from None


def _profile(given: str | None):
    from ..rules.profile import load_profile
    name = given or os.environ.get("ACCEPTANCE_PROFILE") or "auto"
    if name == "auto":
        from ..rules.autoprofile import choose
        return choose()[0]
    return load_profile(name)


def _names(given: str | None, profile) -> list[str]:
    from ..rules.profile import NODE_CHECKS
    if not given:
        return list(profile.get("node_check.checks"))
    names = [n.strip() for n in given.split(",") if n.strip()]
    unknown = [n for n in names if n not in NODE_CHECKS]
    if unknown or not names:
        raise UsageError(f"--checks: {', '.join(unknown) or 'empty'}: not a check (they are: {', '.join(NODE_CHECKS)})")
    return names


def main(args) -> int:
    from ..drivers import nodecheck
    from ..host.sysfs import sysfs_root
    t0 = time.monotonic()
    from ..host.counters import node_name  # SLURMD_NODENAME, else the host name: as counters and run.json
    node = args.node or node_name()
    # Everything that can be wrong with the input is found before any check runs or any node is touched.
    profile = _profile(args.profile)
    names = _names(args.checks, profile)
    deadline = profile.get("node_check.deadline")
    if deadline > nodecheck.DEADLINE_MAX_S:
        raise UsageError(f"node_check.deadline = {deadline:g} s in {profile.source}: at most "
                         f"{nodecheck.DEADLINE_MAX_S:g} s, under Slurm's 60 s limit for a HealthCheckProgram")
    resume_after = args.resume_after if args.resume_after is not None else profile.get("node_check.resume_after")
    if resume_after < 1:
        raise UsageError("--resume-after: at least 1")
    state = StateFile(state_dir(args.state), node, wait=deadline / 2)
    if args.forget:
        state.data["checks"].pop(args.forget, None)
        state.save()
        print(f"acceptance: node-check on {node}: forgot what {args.forget} kept ({state.path})")
        return EXIT_OK
    # The deadline counts from the start: loading the profile and waiting for the lock spend it too.
    outcomes = nodecheck.run_checks(profile, sysfs_root(node), node, state.data["checks"], names,
                                    max(t0 + deadline, time.monotonic() + 0.5))
    for o in outcomes:
        if o.state is not None:
            state.data["checks"][o.check] = o.state
    verdict = nodecheck.verdict(outcomes)
    state.data["passes"] = state.data.get("passes", 0) + 1 if verdict == "pass" else 0
    state.data["last"] = verdict
    state.save()
    slurm = (_slurm(node, verdict, outcomes, state.data["passes"], resume_after,
                    profile.get("node_check.max_drained_fraction")) if args.slurm else None)
    code = EXIT_CODES[verdict]
    if slurm and slurm["outcome"] == "failed" and code == EXIT_OK:
        code = EXIT_USAGE
    seconds = time.monotonic() - t0
    if args.json:
        print(json.dumps({"node": node, "verdict": verdict, "exit_code": code, "seconds": round(seconds, 3),
                          "profile": profile.name, "passes": state.data["passes"], "state": str(state.path),
                          "checks": [o.to_json() for o in outcomes], "slurm": slurm}, indent=1))
    else:
        print(_text(node, verdict, outcomes, seconds, profile.name, slurm))
    return code


def _first_problem(outcomes) -> tuple[str, str]:
    failing = [(o.check, p) for o in outcomes if o.status == "fail" for p in o.problems if p.severity == "fail"]
    check, p = failing[0]
    more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
    return check, f"{p.part}: {p.detail}{more}"


def _fleet_guard(node: str, check: str, fraction: float) -> str | None:
    """Why this node is not drained although `check` failed: too many nodes are drained for the same
    check already (a shared cause: a profile pushed everywhere, a switch, a driver rollout); None to drain.
    One sinfo call, made only on a failure. Where it cannot be counted, the node is drained as usual."""
    from ..host import slurmnode
    try:
        drained, total = slurmnode.drained_for(check)
    except slurmnode.SlurmError:
        return None
    limit = max(2, fraction * total)
    if drained < limit:
        return None
    return (f"{node} left as it is: {drained} of {total} nodes are drained for {check} already "
            f"(node_check.max_drained_fraction {fraction:g}): a cause they share is more likely than one more "
            f"bad node; look at what they have in common")


def _slurm(node: str, verdict: str, outcomes, passes: int, resume_after: int, fraction: float) -> dict:
    """What --slurm did to the node: {"outcome": drained|resumed|left|failed, "detail": ...}."""
    from ..host import slurmnode
    if verdict == "error":
        why = "; ".join(f"{o.check}: {o.note}" for o in outcomes if o.status == "error")
        return {"outcome": "left", "detail": f"{node} left as it is: a check could not run ({why})"}
    if verdict == "fail":
        check, detail = _first_problem(outcomes)
        held = _fleet_guard(node, check, fraction)
        if held:
            return {"outcome": "left", "detail": held}
        outcome, text = slurmnode.apply_drain(slurmnode.Drain(node, slurmnode.reason(check, detail)))
        return {"outcome": outcome, "detail": text}
    if not any(o.status in ("pass", "warn") for o in outcomes):
        # Every check skipped: nothing here says the node is healthy, so nothing is resumed on it.
        return {"outcome": "left", "detail": f"{node} left as it is: every check skipped, nothing was checked"}
    try:
        now = slurmnode.read_state(node)
    except slurmnode.SlurmError as e:
        return {"outcome": "failed", "detail": f"could not read {node}'s state: {e}"}
    if now.drained and now.ours and passes < resume_after:
        return {"outcome": "left", "detail": f"{node} stays drained ({now.reason}) until {resume_after} passes "
                                             f"in a row: {passes} so far"}
    outcome, text = slurmnode.apply_resume(node, now)
    return {"outcome": outcome, "detail": text}


def _text(node, verdict, outcomes, seconds, profile, slurm) -> str:
    counts = {s: sum(o.status == s for o in outcomes) for s in ("fail", "warn", "error", "pass", "skip")}
    words = {"fail": "failed", "warn": "warned", "error": "could not run", "pass": "passed", "skip": "skipped"}
    said = ", ".join(f"{n} {words[s]}" for s, n in counts.items() if n)
    lines = []
    for o in outcomes:
        for p in o.problems:
            lines.append(f"{p.severity.upper()} {o.check}: {p.part}: {p.detail}")
    for o in outcomes:
        if o.status == "error":
            lines.append(f"ERROR {o.check}: could not run: {o.note}")
    for o in outcomes:
        if o.status == "skip":
            lines.append(f"skip {o.check}: {o.note}")
    lines.append(f"node-check {node}: {verdict.upper()} in {seconds:.1f} s ({said}; profile {profile})")
    if slurm:
        lines.append(f"slurm: {slurm['outcome']}: {slurm['detail']}")
    return "\n".join(lines)
