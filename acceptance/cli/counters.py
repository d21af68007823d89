"""`acceptance counters snapshot|diff`: this node's RDMA port counters, and what rose between two snapshots;
`acceptance counters switches snapshot|diff`: the same of the switch ports, read through the fabric."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from .common import EXIT_FAILED, EXIT_OK, UsageError, seconds
from ..rules.profile import load_profile


def add_parser(sub) -> None:
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
               "what a diff judges, by each counter's class and kind (bounds from the profile's [counters]\n"
               "section; every class and its source: docs/rdma.md §5):\n"
               "  fault        error: symbol_error, link_downed, rx_crc_errors_phy, rx_icrc_encapsulated, ...:\n"
               "               must not rise (errors_max); one saturated at its cap during the window fails too\n"
               "               retransmit: out_of_sequence, local_ack_timeout_err, duplicate_request, ...: per\n"
               "               million of the port's packets in the window, fail above retransmit_ppm_max (0)\n"
               "               pre_fec: rx_err_lane_<l>_phy, rx_corrected_bits_phy: bit errors before FEC, which\n"
               "               PAM4 links (200/400/800G) always have: judged as a bit error rate against the\n"
               "               bits received (rx_bits_phy, else the port's rate times the window), fail above\n"
               "               pre_fec_ber_max (2.4e-4, what FEC corrects), warn above pre_fec_ber_warn (1e-5);\n"
               "               errors FEC did not correct (rx_symbol_err_phy, rx_pcs_symbol_err_phy, CRC) are errors\n"
               "  congestion   discard: port_xmit_discards, rx_discards_phy, out_of_buffer, ...: warn above\n"
               "               discards_max; pause: PFC pause frames per second, warn above pause_rate_max;\n"
               "               cnp: CNP / ECN marks per second, warn above cnp_rate_max (both when set);\n"
               "               wait: port_xmit_wait, ...: recorded\n"
               "  application  app: resp_local_length_error, req_remote_access_errors, rnr_nak_retry_err, ...:\n"
               "               a program's own errors, shown and recorded, never a failure or a warning\n"
               "  traffic      data: port_xmit_data, *_packets, *_bytes: shown; a name not known: other, shown\n"
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
    _add_switches(csub)


def _add_switches(csub) -> None:
    switches = csub.add_parser(
        "switches", help="the switch ports' own counters, read through the fabric: snapshot, then diff",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read the switch ports' PMA error counters through the fabric (one `ibqueryerrors` walk per\n"
                    "subnet, `perfquery` per named port, or saved UFM JSON) into a JSON snapshot; diff two\n"
                    "snapshots to see which switch port's counters rose, judged as a host port's are.",
        epilog="around a job, from a host on the fabric (as root: the tools open /dev/infiniband/umad*):\n"
               "  acceptance counters switches snapshot -o before.json\n"
               "  srun python train.py ...\n"
               "  acceptance counters switches snapshot -o after.json\n"
               "  acceptance counters switches diff before.json after.json --topology rails/\n\n"
               "sources (docs/rdma.md §5, \"Switch ports\"):\n"
               "  default     `ibqueryerrors -C DEV -P PORT --switch --threshold-file /dev/null` from every\n"
               "              ACTIVE InfiniBand port of this host at once (--ca to choose): one walk per subnet\n"
               "              reads every switch; a port it does not list reads zero\n"
               "  --port      `perfquery -x` of each named switch port (a LID or a node GUID, and a port)\n"
               "  --from      saved ibqueryerrors or perfquery output, UFM telemetry or UFM's ports resource\n"
               "              (which names switches and the peer at the other end of each cable)\n"
               "a saturated counter (SymbolErrorCounter at 65535) is reported as saturated, never as a rise.\n\n"
               "environment: ACCEPTANCE_IBQUERYERRORS (default ibqueryerrors, e.g. \"sudo -n ibqueryerrors\"),\n"
               "ACCEPTANCE_PERFQUERY (default perfquery)\n"
               "exit codes (diff): 0 nothing failed, 1 a switch port's error counter rose, 2 bad input")
    ssub = switches.add_subparsers(dest="switch_action", required=True, metavar="ACTION")
    snap = ssub.add_parser(
        "snapshot", help="write the switch ports' counters as JSON",
        description="Read the switch ports' counters and write them as JSON (format acceptance-switchports/1) "
                    "to FILE or stdout. What cannot be read (no tool, a walk that fails or times out, no "
                    "InfiniBand port here) is listed under \"problems\", never an error.")
    snap.add_argument("-o", "--output", metavar="FILE", help="write here, atomically (default: stdout)")
    source = snap.add_mutually_exclusive_group()
    source.add_argument("--port", metavar="SWITCH:PORT", action="append", type=_switch_port,
                        help="read this switch port with perfquery (SWITCH: a LID or a node GUID 0x...); "
                             "repeat for more")
    source.add_argument("--from", dest="files", metavar="FILE", action="append",
                        help="read a saved ibqueryerrors or perfquery output or UFM JSON; repeat for more "
                             "(give the same files in the same order before and after)")
    snap.add_argument("--ca", metavar="DEV:PORT", action="append", type=_host_port,
                      help="walk from this host port (default: every ACTIVE InfiniBand port of this host; "
                           "one per subnet is enough); with --port, the port perfquery asks from")
    snap.add_argument("--timeout", metavar="SECONDS", type=seconds, default=None,
                      help="bound on each walk (default 300 s) or each perfquery (default 10 s)")
    snap.set_defaults(func=cmd_switches_snapshot)
    sdiff = ssub.add_parser(
        "diff", help="which switch port's counters rose between two snapshots, judged against the profile",
        description="Compare two switch ports snapshots: a table of the counters that moved, then one line per "
                    "problem naming the switch and port. Exit 1 when an error counter rose (or saturated), "
                    "0 otherwise (warnings included), 2 for unusable input.")
    sdiff.add_argument("before", metavar="BEFORE", help="snapshot taken before the window")
    sdiff.add_argument("after", metavar="AFTER", help="snapshot taken after it")
    sdiff.add_argument("--json", action="store_true",
                       help='print {"seconds", "deltas", "findings", "notes", "verdict"} as JSON')
    sdiff.add_argument("--profile", metavar="NAME|PATH", help="profile whose [counters] bounds apply (default: local)")
    sdiff.add_argument("--topology", metavar="PATH",
                       help="switch tree (topology.conf, topology.yaml, ibnetdiscover output or a folder of them): "
                            "the rail of each switch and the switch at the other end of an uplink")
    sdiff.set_defaults(func=cmd_switches_diff)


def _host_port(text: str) -> tuple[str, int]:
    device, sep, port = text.rpartition(":")
    if not sep or not device or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected DEV:PORT (mlx5_0:1), got {text!r}")
    return device, int(port)


def _switch_port(text: str) -> tuple[str, int]:
    switch, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not (switch.isdigit() or re.fullmatch(r"0x[0-9a-fA-F]{1,16}", switch)):
        raise argparse.ArgumentTypeError(f"expected SWITCH:PORT, SWITCH a LID (1187) or a node GUID "
                                         f"(0x0002c903006e29b0), got {text!r}")
    return switch, int(port)


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
    for line in snap["notes"]:
        print(f"  note: {line}", file=sys.stderr)
    return EXIT_OK


def cmd_counters_diff(args) -> int:
    import json

    from ..host import counters as ctr
    from ..rules import counter_verdicts as cv
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


def cmd_switches_snapshot(args) -> int:
    import json

    from ..host import switchports as sp
    epoch = None
    if args.files:
        if args.ca:
            raise UsageError("--ca says where to walk the fabric from: not with --from (files)")
        readings = sp.read_files(args.files)
        epoch = max(os.stat(f).st_mtime for f in args.files)  # when the saved outputs were written
    elif args.port:
        if args.ca and len(args.ca) > 1:
            raise UsageError("--port asks from one host port: give --ca once")
        readings = sp.query_ports(args.port, args.ca[0] if args.ca else None, args.timeout or sp.PERFQUERY_TIMEOUT)
    else:
        readings = sp.walk(args.ca, args.timeout or sp.WALK_TIMEOUT)
    snap = sp.snapshot(readings, epoch)
    where = "stdout"
    if args.output:
        try:
            where = str(sp.save(snap, args.output))
        except OSError as e:
            raise UsageError(f"{args.output}: cannot write the snapshot: {e.strerror or e}") from None
    else:
        sys.stdout.write(json.dumps(snap, indent=1) + "\n")
    lines = sp.summary(snap)
    print(f"acceptance: {lines[0]} -> {where}", file=sys.stderr)
    for line in lines[1:]:
        print(line, file=sys.stderr)
    return EXIT_OK


def cmd_switches_diff(args) -> int:
    import json
    from dataclasses import asdict

    from ..analysis import switchports as switch_ports
    from ..host import switchports as sp
    from ..records.results import worst
    from ..rules import counter_verdicts as cv
    from ..rules.switches import fabric_for
    before, after = sp.load_snapshot(args.before), sp.load_snapshot(args.after)
    profile = load_profile(args.profile)
    limits = cv.Limits.from_profile(profile)
    fabric = fabric_for(profile, args.topology) if args.topology else None
    try:
        deltas, facts = sp.diff(before, after), sp.port_facts(before, after)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"{args.before}, {args.after}: malformed snapshot ({type(e).__name__}: {e})") from None
    verdicts = switch_ports.judge(deltas, limits)
    found = switch_ports.findings(verdicts, facts, limits, fabric)
    worst_seen = worst(v for v, _ in verdicts)
    verdict = "pass" if worst_seen == "info" else worst_seen  # as counter_verdicts.verdict_of says it
    if args.json:
        print(json.dumps({"seconds": deltas.seconds, "deltas": [asdict(d) for d in deltas], "findings": found,
                          "notes": deltas.notes, "verdict": verdict}, indent=1))
    else:
        print(switch_ports.format_diff(deltas, verdicts, limits, facts))
        if found:
            print("\nfindings:")
            for f in found:
                print(f"  {f['severity'].upper()} {f['message']}")
        print(f"verdict: {verdict.upper()}")
    return EXIT_FAILED if verdict == "fail" else EXIT_OK
