"""`acceptance node-check`: this node's health in seconds (no MPI), and with --slurm its place in Slurm's
lifecycle: drain on a failure with a reason of our own, resume after passes only what we drained."""

from __future__ import annotations

import argparse
import json
import os
import time

from ..checks.state import ENV_STATE
from .common import EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK, UsageError

# A check that could not run is INCOMPLETE (3), as every command says "could not judge": never a failure.
EXIT_CODES = {"pass": EXIT_OK, "fail": EXIT_FAILED, "error": EXIT_INCOMPLETE}


def add_parser(sub) -> None:
    from ..rules.schema import NODE_CHECKS
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
                    "Only rail ports are judged: a management or VM-network NIC, a bond or a BlueField's host\n"
                    "port is listed as not a rail (topology.nic_rails, topology.rails, preflight.link_layer);\n"
                    "a rail that is missing fails. A port counter's rise is judged by what it means: a fault\n"
                    "fails, congestion warns, an application's own error is information (docs/rdma.md).\n"
                    "A check whose hardware is absent skips and says why; one that cannot run (a tool missing,\n"
                    "a file unreadable, an NVML error other than not-supported, the deadline) \"could not run\":\n"
                    "never a failure, never a drain. A GPU NVML calls lost fails.\n\n"
                    "With --slurm (Slurm's HealthCheckProgram or a prolog: slurm/node-check.sh):\n"
                    "  fail   drain this node, reason \"acceptance: <check>: <part>: <detail>\"; a node drained\n"
                    "         by anyone else keeps its reason\n"
                    "  pass   after node_check.resume_after (2) passes in a row, resume the node if its reason\n"
                    "         is ours (starts \"acceptance:\", as run --drain's are too); never anyone else's\n"
                    "  error  leave the node as it is (our own trouble never drains a node)",
        epilog="exit codes: 0 healthy (warnings included), 1 a check failed, 2 a usage or profile error (with\n"
               "            --profile auto: no built-in matches this node), 3 a check could not run (with --slurm\n"
               "            the node is left as it is then)\n\n"
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
                   help="thresholds profile (default: $ACCEPTANCE_PROFILE, else auto: the built-in matching this "
                        "node; none matching exits 2 naming what the node has)")
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


def _profile(given: str | None):
    from ..rules.profile import load_profile
    name = given or os.environ.get("ACCEPTANCE_PROFILE") or "auto"
    if name == "auto":
        from ..rules.autoprofile import choose
        return choose()[0]  # ProfileError (exit 2) when no built-in matches: `fleet` only by name
    return load_profile(name)


def _names(given: str | None, profile) -> list[str]:
    from ..rules.schema import NODE_CHECKS
    if not given:
        return list(profile.get("node_check.checks"))
    names = [n.strip() for n in given.split(",") if n.strip()]
    unknown = [n for n in names if n not in NODE_CHECKS]
    if unknown or not names:
        raise UsageError(f"--checks: {', '.join(unknown) or 'empty'}: not a check (they are: {', '.join(NODE_CHECKS)})")
    return names


def main(args) -> int:
    from ..checks import runner, slurm
    from ..checks.state import StateError, StateFile, state_dir
    from ..host.sysfs import sysfs_root
    t0 = time.monotonic()
    from ..host.counters import node_name  # SLURMD_NODENAME, else the host name: as counters and run.json
    node = args.node or node_name()
    # Everything that can be wrong with the input is found before any check runs or any node is touched.
    profile = _profile(args.profile)
    names = _names(args.checks, profile)
    deadline = profile.get("node_check.deadline")
    if deadline > runner.DEADLINE_MAX_S:
        raise UsageError(f"node_check.deadline = {deadline:g} s in {profile.source}: at most "
                         f"{runner.DEADLINE_MAX_S:g} s, under Slurm's 60 s limit for a HealthCheckProgram")
    resume_after = args.resume_after if args.resume_after is not None else profile.get("node_check.resume_after")
    if resume_after < 1:
        raise UsageError("--resume-after: at least 1")
    try:
        state = StateFile(state_dir(args.state), node, wait=deadline / 2)
        if args.forget:
            state.data["checks"].pop(args.forget, None)
            state.save()
            print(f"acceptance: node-check on {node}: forgot what {args.forget} kept ({state.path})")
            return EXIT_OK
        # The deadline counts from the start: loading the profile and waiting for the lock spend it too.
        outcomes = runner.run_checks(profile, sysfs_root(node), node, state.data["checks"], names,
                                     max(t0 + deadline, time.monotonic() + 0.5))
        for o in outcomes:
            if o.state is not None:
                state.data["checks"][o.check] = o.state
        verdict = runner.verdict(outcomes)
        state.data["passes"] = state.data.get("passes", 0) + 1 if verdict == "pass" else 0
        state.data["last"] = verdict
        state.save()
    except StateError as e:
        raise UsageError(str(e)) from None
    done = (slurm.act(node, verdict, outcomes, state.data["passes"], resume_after,
                      profile.get("node_check.max_drained_fraction")) if args.slurm else None)
    code = EXIT_CODES[verdict]
    if done and done["outcome"] == "failed" and code == EXIT_OK:
        code = EXIT_INCOMPLETE  # Slurm's state could not be read: nothing resumed, nothing judged wrong
    seconds = time.monotonic() - t0
    if args.json:
        print(json.dumps({"node": node, "verdict": verdict, "exit_code": code, "seconds": round(seconds, 3),
                          "profile": profile.name, "passes": state.data["passes"], "state": str(state.path),
                          "checks": [o.to_json() for o in outcomes], "slurm": done}, indent=1))
    else:
        print(_text(node, verdict, outcomes, seconds, profile.name, done))
    return code


def _text(node, verdict, outcomes, seconds, profile, slurm) -> str:
    counts = {s: sum(o.status == s for o in outcomes) for s in ("fail", "warn", "error", "pass", "skip")}
    words = {"fail": "failed", "warn": "warned", "error": "could not run", "pass": "passed", "skip": "skipped"}
    said = ", ".join(f"{n} {words[s]}" for s, n in counts.items() if n)
    lines = []
    for o in outcomes:
        for p in o.problems:
            lines.append(f"{p.severity.upper()} {o.check}: {p.part}: {p.detail}")
    for o in outcomes:
        for line in o.could_not():
            lines.append(f"ERROR {o.check}: could not run: {line}")
    for o in outcomes:
        if o.status == "skip":
            lines.append(f"skip {o.check}: {o.note}")
    lines.append(f"node-check {node}: {verdict.upper()} in {seconds:.1f} s ({said}; profile {profile})")
    if slurm:
        lines.append(f"slurm: {slurm['outcome']}: {slurm['detail']}")
    return "\n".join(lines)
