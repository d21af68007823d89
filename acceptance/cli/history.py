"""`acceptance history`: the store of nights (ingest, check, show, worst, pin, prune)."""

from __future__ import annotations

import argparse
import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .common import EXIT_FAILED, EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, UsageError
from ..records.results import InputError

HELP = """\
The store keeps every night's value per link (and per NIC, node, rail and the fleet), keyed by what
the parts physically are (a NIC by node, device, node GUID and port), and the findings of each night.
It is a folder: --history PATH, else $ACCEPTANCE_HISTORY, else history/ beside the run folder
(reports/history for the commands that take no run folder).

examples:
  acceptance history ingest reports/20261201-020000-ab12          keep a night (twice: counted once)
  acceptance history pin reports/20261102-020000-77aa             the cluster's acceptance run: the reference
  acceptance history check reports/20261201-020000-ab12           tonight against the pinned run and the
                                                                  median of the last K accepted nights
  acceptance history show node07:rail3 --plot nic.png             one NIC's series (node07, node07:rail3:node12,
                                                                  rail3, fleet)
  acceptance history worst --since 30d                            what drifted or flapped most
  acceptance history prune --keep 365d                            drop older nights (never the pinned one)
"""


def add_parser(sub) -> None:
    h = sub.add_parser("history", help="the store of nights: drift, intermittent parts, fleet trends",
                       description="Every link's history across nights. " + HELP.split("\n\n")[0],
                       epilog=HELP.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    hs = h.add_subparsers(dest="history_command", required=True, metavar="SUBCOMMAND")

    def store_arg(p):
        p.add_argument("--history", metavar="PATH", help="the store folder (default: $ACCEPTANCE_HISTORY, else "
                                                          "history/ beside the run folder, else reports/history)")

    p = hs.add_parser("ingest", help="keep run folders in the store (idempotent)",
                      description="Keep each RUN_DIR's values, identities and findings. A run already in the "
                                  "store is counted once; a run that did not complete is kept and marked "
                                  "incomplete (never a healthy night); a folder whose files do not parse is "
                                  "refused (exit 2, naming the file).")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    store_arg(p)
    p.set_defaults(func=cmd_ingest)

    p = hs.add_parser("check", help="judge a night against its history (exit 0/1/2/3 like report)",
                      description="Ingest RUN_DIR if needed and judge it against the pinned reference and the "
                                  "median of the last K accepted nights: drift, intermittent, recovered and "
                                  "fleet-trend findings, each with its series. Prints them, writes "
                                  "RUN_DIR/history.json, and exits 1 when the night or a history finding fails, "
                                  "3 when the night is incomplete. The thresholds are the run profile's "
                                  "[history] keys (acceptance profiles show NAME).")
    p.add_argument("run_dir", metavar="RUN_DIR")
    store_arg(p)
    p.set_defaults(func=cmd_check)

    p = hs.add_parser("show", help="one component's series as a table (--plot FILE.png draws it)",
                      description="COMPONENT: node07 (a node), node07:rail3 (its NIC on rail 3), "
                                  "node07:rail3:node12 (a link), rail3 (a rail plane's median) or fleet.")
    p.add_argument("component", metavar="COMPONENT")
    p.add_argument("--metric", default=None, metavar="NAME",
                   help="rdma_write.bandwidth (default), rdma_write.read_bandwidth, rdma_write.latency_p50, "
                        "rdma_write.latency_p99, or all")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the series into this PNG")
    p.add_argument("--since", metavar="AGE", type=_age, help="only nights newer than this (30d, 12w, 48h)")
    store_arg(p)
    p.set_defaults(func=cmd_show)

    p = hs.add_parser("worst", help="the components drifting or flapping most",
                      description="Components ranked by the nights with history findings (drift, "
                                  "intermittent), then by the nights with any finding.")
    p.add_argument("--since", metavar="AGE", type=_age, default=_age("30d"), help="look back this far (default 30d)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="rows (default 20)")
    store_arg(p)
    p.set_defaults(func=cmd_worst)

    p = hs.add_parser("pin", help="pin a reference run (the cluster's acceptance run)",
                      description="Every later night is judged against RUN_DIR as well as against the rolling "
                                  "median, so a slow drift cannot creep into the reference. One run is pinned "
                                  "at a time; pinning another replaces it.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--if-none", action="store_true", help="only when no run is pinned yet, and only a night whose rail planes were even "
                   "(the nightly job's first night; an uneven one is left unpinned, and says why)")
    store_arg(p)
    p.set_defaults(func=cmd_pin)

    p = hs.add_parser("prune", help="drop nights older than --keep (never the pinned one)")
    p.add_argument("--keep", metavar="AGE", type=_age, required=True, help="keep this much: 365d, 52w")
    store_arg(p)
    p.set_defaults(func=cmd_prune)


def _age(text: str) -> timedelta:
    m = re.fullmatch(r"\s*(\d+)\s*(d|w|h)\s*", str(text))
    if not m:
        raise argparse.ArgumentTypeError(f"expected an age like 30d, 12w or 48h, got {text!r}")
    n, unit = int(m.group(1)), m.group(2)
    return timedelta(days=n) if unit == "d" else timedelta(weeks=n) if unit == "w" else timedelta(hours=n)


def _iso(delta: timedelta) -> str:
    return (datetime.now(timezone.utc) - delta).isoformat(timespec="seconds").replace("+00:00", "Z")


def _open(args, run_dir=None, create=True):
    from ..history.store import Store, default_path
    path = Path(args.history) if args.history else default_path(run_dir)
    return Store.open(path, create=create)


def cmd_ingest(args) -> int:
    from ..history.store import StoreError
    store = _open(args, args.run_dirs[0])
    code = EXIT_OK
    for run_dir in args.run_dirs:
        try:
            got = store.ingest(run_dir)
        except StoreError:
            raise
        except InputError as e:
            print(f"acceptance: refused {run_dir}: {e}")
            code = EXIT_USAGE
            continue
        if not got.new:
            print(f"{got.run_id}: already in the store (night {got.night}, {got.verdict}); counted once")
            continue
        print(f"{got.run_id}: kept as night {got.night} ({got.verdict}), {got.links} links")
        for name in got.replaced:
            print(f"  {name}: a different part than before (new GUID or serial): its series starts again")
    print(f"history: {store.path}")
    return code


def _night_row(store, run_dir):
    got = store.ingest(run_dir)
    row = store.night(got.run_id)
    if got.new:
        print(f"history: kept {got.run_id} as night {got.night} ({got.verdict})")
    return row


def cmd_check(args) -> int:
    from ..analysis.pipeline import run_profile
    from ..history.findings import accepted, check_night, uneven_planes, uneven_text
    run_dir = Path(args.run_dir)
    store = _open(args, run_dir)
    tonight = _night_row(store, run_dir)
    profile = run_profile(run_dir)
    findings, ref = check_night(store, tonight, profile)
    store.record_findings(tonight["id"], findings)
    uneven = uneven_planes(store, tonight, profile, ref.pinned)
    store.set_accepted(tonight["id"], is_accepted := accepted(tonight, findings, uneven))
    against = []
    if ref.pinned:
        against.append(f"the pinned run {ref.pinned['run_id']} ({str(ref.pinned['started'])[:10]})")
    if ref.rolling:
        against.append(f"the median of the last {len(ref.rolling)} accepted night(s)")
    print(f"history: {store.path}; {tonight['run_id']} ({tonight['verdict']}) judged against "
          + (" and ".join(against) if against else "nothing yet (no pinned run, no accepted night)"))
    for f in findings:
        print(f"  {f['severity'].upper()} {f['kind']} {f['subject']}: {f['message']}")
        for line in f["evidence"][:2]:
            print(f"      {line}")
    if not findings:
        print("  no drift, intermittent, recovered or trend finding")
    if uneven and tonight["verdict"] == "pass":
        print(f"history: {tonight['run_id']} is not a reference night (the rolling median's): an uneven rail plane")
        for plane in uneven:
            print(f"  {uneven_text(plane)}")
    (run_dir / "history.json").write_text(json.dumps({
        "store": str(store.path.resolve()), "night": tonight["id"], "run_id": tonight["run_id"],
        "pinned": ref.pinned and ref.pinned["run_id"], "rolling": [n["run_id"] for n in ref.rolling],
        "accepted": is_accepted, "uneven": uneven, "findings": findings}, indent=1, default=str) + "\n")
    if tonight["verdict"] == "incomplete":
        return EXIT_INCOMPLETE
    failed = tonight["verdict"] == "fail" or any(f["severity"] == "fail" for f in findings)
    return EXIT_FAILED if failed else EXIT_OK


def cmd_show(args) -> int:
    from ..history.components import parse_name
    try:
        name = parse_name(args.component)
    except ValueError as e:
        raise UsageError(str(e)) from None
    store = _open(args, create=False)
    metric = None if args.metric == "all" else (args.metric or "rdma_write.bandwidth")
    s = store.series(name, metric)
    if args.since:
        s = s[s["started"] >= _iso(args.since)]
    if s.empty:
        known = store.db.execute("SELECT count(*) FROM nights").fetchone()[0]
        print(f"{name}: no values in {store.path} ({known} nights kept)"
              + ("" if metric is None else f" for {metric} (--metric all lists every metric)"))
        return EXIT_OK
    parts = list(dict.fromkeys(s["part"].dropna()))
    print(f"{name}: {s['night'].nunique()} nights" + (f"; {len(parts)} physical parts (replaced)" if len(parts) > 1
                                                       else ""))
    print(f"  {'date':<10}  {'run':<28} {'metric':<24} {'value':>10}  verdict     findings")
    last_part = None
    for r in s.itertuples():
        if last_part is not None and r.part != last_part and isinstance(r.part, (int, str)):
            print(f"  --- replaced: a new part from here (component {r.part}) ---")
        last_part = r.part
        mark = " pinned" if r.pinned else ""
        print(f"  {str(r.started)[:10]:<10}  {str(r.run_id)[:28]:<28} {r.metric:<24} {r.value:>10.4g}  "
              f"{r.verdict:<10}{mark} {r.findings}")
    if args.plot:
        _plot(s, str(name), args.plot)
        print(f"plot: {args.plot}")
    return EXIT_OK


def _plot(s, title: str, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for metric, g in s.groupby("metric"):
        dates = [str(x)[:10] for x in g["started"]]
        ax.plot(range(len(g)), g["value"], marker="o", ms=3, label=metric)
        pinned = [i for i, p in enumerate(g["pinned"]) if p]
        ax.plot(pinned, g["value"].to_numpy()[pinned], "s", ms=8, mfc="none", color="k",
                label="pinned" if pinned else None)
        step = max(1, len(dates) // 8)
        ax.set_xticks(range(0, len(dates), step), dates[::step], rotation=30, fontsize=7)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise UsageError(f"--plot {path}: cannot write: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def cmd_worst(args) -> int:
    import pandas as pd
    store = _open(args, create=False)
    nights = store.nights(_iso(args.since))
    f = store.findings(nights["id"].tolist())
    if f.empty:
        print(f"no findings in the {len(nights)} nights since {_iso(args.since)[:10]}")
        return EXIT_OK
    f = f[f["subject"] != "fleet"] if (f["subject"] != "fleet").any() else f
    hist = f[f["kind"].isin(["drift", "intermittent"])].groupby("subject")["night"].nunique()
    anyf = f.groupby("subject")["night"].nunique()
    kinds = f.groupby("subject")["kind"].agg(lambda k: ", ".join(sorted(set(k.dropna()))))
    last = f.merge(nights[["id", "started"]], left_on="night", right_on="id").groupby("subject")["started"].max()
    t = pd.DataFrame({"history": hist, "nights": anyf, "kinds": kinds, "last": last}).fillna({"history": 0})
    t = t.sort_values(["history", "nights", "last"], ascending=False).head(args.top)
    print(f"{len(nights)} nights since {_iso(args.since)[:10]}; worst {len(t)}:")
    print(f"  {'component':<28} {'drift/flap':>10} {'nights':>7}  last        kinds")
    for subject, r in t.iterrows():
        print(f"  {subject:<28} {int(r['history']):>10} {int(r['nights']):>7}  {str(r['last'])[:10]:<10}  {r['kinds']}")
    return EXIT_OK


def cmd_pin(args) -> int:
    from ..analysis.pipeline import run_profile
    from ..history.findings import uneven_planes, uneven_text
    run_dir = Path(args.run_dir)
    store = _open(args, run_dir)
    row = _night_row(store, run_dir)
    pinned = store.pinned()
    if args.if_none and pinned:
        print(f"history: {pinned['run_id']} stays the pinned reference")
        return EXIT_OK
    if row["verdict"] == "incomplete":
        raise UsageError(f"{run_dir}: did not complete; an incomplete run cannot be the reference")
    # A reference with a plane stalled that night holds that plane's links to its own low: every later
    # night's drift on it is measured from there. The nightly job's own pin waits for an even night.
    uneven = uneven_planes(store, row, run_profile(run_dir))
    if args.if_none and uneven:
        print(f"history: not pinned: {row['run_id']} had an uneven rail plane; the next even passing night is "
              "pinned (or pin one by hand: acceptance history pin RUN_DIR)")
        for plane in uneven:
            print(f"  {uneven_text(plane)}")
        return EXIT_OK
    store.pin(row["run_id"])
    note = "" if row["verdict"] == "pass" else f" (note: it did not pass: {row['verdict']})"
    print(f"history: pinned {row['run_id']} ({str(row['started'])[:10]}) as the reference{note}")
    for plane in uneven:
        print(f"  note: {uneven_text(plane)}: drifts on that plane are measured from there; pin another night "
              "if it was a passing stall (acceptance history pin RUN_DIR)")
    return EXIT_OK


def cmd_prune(args) -> int:
    store = _open(args, create=False)
    before = _iso(args.keep)
    n = store.prune(before)
    print(f"history: dropped {n} night(s) started before {before[:10]} (the pinned run is kept)")
    return EXIT_OK
