"""`acceptance report` (re-analyze a run folder) and `acceptance compare` (a run against a baseline)."""

from __future__ import annotations

import sys
from pathlib import Path

from .common import EXIT_FAILED, EXIT_OK, UsageError, positive, run_folder
from ..records.results import InputError


def add_parser(sub) -> None:
    report = sub.add_parser(
        "report", help="(re)analyze a run folder: findings.json, drain.txt, report.html",
        description="Re-evaluate every record of RUN_DIR against the profile run.json keeps (its resolved values), "
                    "localize what is slow or broken, and (re)write findings.json, drain.txt and report.html "
                    "there. Works on a folder holding only results.jsonl and a run.json with run_id and "
                    "profile. Exit 1 when a finding fails.")
    report.add_argument("run_dir", metavar="RUN_DIR")
    report.add_argument("--baseline", metavar="RUN_DIR", help="a good earlier run: regressions become findings")
    report.add_argument("--force", action="store_true",
                        help="with --baseline: compare even when the runs' profiles, engines or layouts differ")
    report.add_argument("-o", "--output", metavar="FILE", help="where to write the HTML (default: RUN_DIR/report.html)")
    report.add_argument("--drain", action="store_true", help="execute the scontrol drain lines (default: print them)")
    report.add_argument("--topology", metavar="PATH",
                        help="the cluster's switch tree to localize on, instead of the one run.json keeps "
                             "(Slurm topology.conf or topology.yaml, ibnetdiscover output, or a folder of "
                             "rail<N>* ibnetdiscover outputs): findings can then name a leaf switch or uplink")
    report.add_argument("--routes", metavar="PATH",
                        help="the fabric's forwarding tables to follow over the tree's cabling (ibroute or "
                             "dump_lfts.sh output, ibdiagnet2.fdbs, or a folder of them), instead of those run.json "
                             "names: a slow switch-to-switch cable is then named with both ends")
    report.add_argument("--prometheus", metavar="FILE",
                        help="also write the verdict, findings and per-NIC / per-rail / collective medians in "
                             "node_exporter's textfile format (replaced atomically); point node_exporter's "
                             "--collector.textfile.directory at the folder and name the file *.prom, e.g. "
                             "/var/lib/node_exporter/textfile/acceptance.prom. With RUN_DIR/history.json "
                             "(acceptance history check), also its drift and intermittent findings "
                             "(acceptance_history_finding)")
    report.add_argument("--history", metavar="PATH",
                        help="the history store folder (acceptance history; only when given, never "
                             "$ACCEPTANCE_HISTORY): adds a History section, the store's median write "
                             "bandwidth per rail and for the fleet night by night (pinned night marked, this "
                             "night last), and a sparkline of every part with a drift or intermittent finding "
                             "in RUN_DIR/history.json (`acceptance history check RUN_DIR` writes it). A path "
                             "that is not a store: exit 2")
    report.set_defaults(func=cmd_report)
    compare = sub.add_parser(
        "compare", help="per-metric, per-link changes of a run against a baseline run",
        description="Median of each metric per link (and size, rail) in RUN_DIR against BASELINE_DIR; "
                    "worst changes first. A change for the worse beyond the profile's "
                    "analysis.regression_tolerance (default 5%%) is a regression; exit 1 if there is one.")
    compare.add_argument("run_dir", metavar="RUN_DIR")
    compare.add_argument("baseline_dir", metavar="BASELINE_DIR")
    compare.add_argument("--top", type=positive, default=20, metavar="N", help="rows to show (default 20)")
    compare.add_argument("--force", action="store_true",
                         help="compare even runs judged by different profiles, engines or node/rail layouts "
                              "(otherwise exit 2 naming what differs); the differences are printed first")
    compare.set_defaults(func=cmd_compare)


def cmd_report(args) -> int:
    from .postrun import analyze_and_report, execute_drains, summary
    folder = run_folder(args.run_dir)
    baseline = run_folder(args.baseline) if args.baseline else None
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
    store = _history_store(args.history) if args.history else None  # before the analysis, too
    try:
        analysis, report = analyze_and_report(folder, baseline, args.output, topology=args.topology,
                                              history=store, routes=args.routes)
    except InputError as e:
        raise UsageError(str(e)) from None
    finally:
        if store is not None:
            store.close()
    print(summary(analysis, report, folder))
    if args.prometheus:
        from ..export.prometheus import write
        check = _history_check(folder, (analysis.run or {}).get("run_id"))
        try:
            print(f"prometheus: {write(analysis, args.prometheus, history=check)}")
        except OSError as e:
            raise UsageError(f"--prometheus {args.prometheus}: cannot write: {e.strerror or e}") from None
    if args.drain:
        execute_drains(analysis.drains)
    return analysis.exit_code


def _history_store(path: str):
    """The store --history names, opened for reading; a UsageError (exit 2) naming the path when it is none."""
    from ..history.store import Store, StoreError
    if not Path(path).exists():
        raise UsageError(f"--history {path}: no such folder (the history store `acceptance history ingest` "
                         "or `history check` makes)")
    try:
        return Store.open(path, create=False)
    except StoreError as e:
        raise UsageError(f"--history: {e}") from None


def _history_check(run_dir: Path, run_id) -> dict | None:
    """RUN_DIR/history.json when it is this run's history check, else None (and a note why, when it is there)."""
    from ..history.checked import check_problem, read_check
    try:
        check = read_check(run_dir)
    except InputError as e:
        print(f"acceptance: note: no history findings exported: {e}", file=sys.stderr)
        return None
    problem = check and check_problem(check, run_id)
    if problem:
        print(f"acceptance: note: no history findings exported: {problem}", file=sys.stderr)
        return None
    return check


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
    run_dir, baseline_dir = run_folder(args.run_dir), run_folder(args.baseline_dir)
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
