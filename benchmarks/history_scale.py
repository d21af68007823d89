"""The history store at cluster scale: a year of nightly runs of a 1,024-node x 8-rail cluster.

    .venv/bin/python benchmarks/history_scale.py [--nodes 1024] [--rails 8] [--nights 365] [--real 3]
                                                 [--keep DIR]
    .venv/bin/python benchmarks/history_scale.py --quick      # 64 nodes x 2 rails x 20 nights (smoke run)

Measures the four targets docs/history.md sets for `acceptance history`, through the store's own
code (acceptance.history.store / judge), and prints each figure against its target (PASS / MISS):

  ingest     Store.ingest(run_dir) of one night: a tests/synthetic.py make_run_fast folder (one
             rdma_write bandwidth record per node pair per rail: 4,190,208 records at 1024 x 8),
             as acceptance run leaves it: an empty findings.json (so ingest keeps the run's findings
             instead of running the whole analysis) and links.npz, which the run's own analysis
             writes from the records it has parsed (save_links: timed and printed, not counted).
             The worst of the --real ingests into an empty store; tonight's, into the year-old
             store, is of a folder without links.npz (parsed at ingest) and printed beside it.
             Generating the folders is not timed.
  growth     bytes on disk of the store folder (st_blocks: the column files, the shared key array,
             history.db with its WAL) after the --real ingested nights, divided by their number.
  series     Store.series(link, "rdma_write.bandwidth") for one link over the whole year (a fresh
             Store, so the key array is mapped anew; the worst of 5 calls).
  drift      check_night(store, tonight, profile), which runs the fleet-wide drift scan: every link of
             tonight against the pinned night and the rolling median of the last K (history.window,
             7) accepted nights, with the localization of what drifted, the trend, intermittent and
             recovered checks and the findings' series.

The year is built cheaply: the first --real nights are real ingests of one generated folder (its
run.json rewritten with another run id and start date each time); the nights between them and
tonight are REPLICAS of the first ingested night, written in the store's own layout (its .npy
column times fresh +-1% noise per night under the night's own file name, a `nights` row sharing
the real night's key array, and copies of its `summary` and `fleet` rows), marked
source='benchmark-replica'. Tonight is a real ingest of a second generated folder (another seed)
with one NIC slowed to x0.92 on a rail, so the scan has something to localize.

Exit 0 whatever the figures (a measurement, not a test), 1 on an error. Peak memory ~2-3 GiB and
~8 GB of temporary disk at full size; everything is deleted at the end unless --keep DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from itertools import islice
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from acceptance.analysis.load import load_records  # noqa: E402
from acceptance.analysis.pipeline import run_profile  # noqa: E402
from acceptance.history.components import parse_name  # noqa: E402
from acceptance.history.findings import check_night, drift_scan, nic_table  # noqa: E402
from acceptance.history.night import save_links  # noqa: E402
from acceptance.history.store import Store, file_stem, save_column  # noqa: E402
from synthetic import BASE_TIME, make_run_fast, node_names  # noqa: E402

TARGET_INGEST_S, TARGET_GROWTH_MB, TARGET_SERIES_S, TARGET_DRIFT_S = 60.0, 100.0, 1.0, 60.0
METRIC = "rdma_write.bandwidth"
REPLICA_NOISE = 0.01   # each replicated night: the real night's values x (1 + U(-1%, +1%))
SLOW = 0.92            # tonight's slowed NIC: an 8% loss, a drift (tolerance 5%) short of a failure (10%)
SERIES_CALLS = 5


def say(text: str) -> None:
    print(text, flush=True)


def _stamp(day: int) -> str:
    return (BASE_TIME + timedelta(days=day)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _run_id(day: int) -> str:
    return f"night-{day:03d}"


def _as_night(run_dir: Path, day: int) -> None:
    """Make the folder another night: its run.json's run id and start date; no findings (so ingest
    keeps these instead of running the analysis)."""
    run = json.loads((run_dir / "run.json").read_text())
    run.update(run_id=_run_id(day), start=_stamp(day), end=_stamp(day).replace("T02:", "T03:"))
    (run_dir / "run.json").write_text(json.dumps(run) + "\n")
    (run_dir / "findings.json").write_text("[]\n")


def _disk_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.stat(os.path.join(dirpath, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _json_loads_us(run_dir: Path, lines: int = 100_000) -> float:
    """This machine's speed in the unit benchmarks/report_scale.py's baseline uses: json.loads per record."""
    with open(run_dir / "results.jsonl", "rb") as fh:
        block = list(islice(fh, lines))
    t = time.perf_counter()
    for line in block:
        json.loads(line)
    return (time.perf_counter() - t) / max(1, len(block)) * 1e6


def _ingest(store: Store, run_dir: Path, day: int) -> float:
    _as_night(run_dir, day)
    t = time.perf_counter()
    got = store.ingest(run_dir)
    seconds = time.perf_counter() - t
    if not got.new or got.verdict != "pass":
        raise SystemExit(f"history_scale: {_run_id(day)} was not kept as a new passing night: {got}")
    return seconds


def _replicate(store: Store, source_run_id: str, days: range, seed: int) -> None:
    """REPLICAS, not ingests: the nights `days`, each a copy of the real ingested night `source_run_id`
    in the store's own layout (what Store.add writes: one .npy column per metric named after the
    night, the shared key array, a `nights` row, its `summary` and `fleet` rows), the per-link values
    with fresh noise so the rolling median and the links' night-to-night steps are not degenerate."""
    src = store.night(source_run_id)
    metrics = json.loads(src["metrics"])
    columns = {m: np.load(store.path / "nights" / info["file"]) for m, info in metrics.items()}
    rng = np.random.default_rng(seed)
    t = time.perf_counter()
    step = max(1, len(days) // 8)
    for start in range(0, len(days), step):
        chunk = days[start:start + step]
        with store.write():
            for day in chunk:
                run_id = _run_id(day)
                stored = {}
                for m, info in metrics.items():
                    col = columns[m]
                    values = rng.random(len(col), dtype=np.float32)  # in place: U(0,1) -> col x (1 +- noise)
                    values *= np.float32(2 * REPLICA_NOISE)
                    values += np.float32(1 - REPLICA_NOISE)
                    values *= col
                    file = store.path / "nights" / f"{file_stem(run_id)}.{m}.npy"
                    save_column(file, values)
                    stored[m] = {**info, "file": file.name}
                cur = store.db.execute(
                    "INSERT INTO nights(run_id, started, path, verdict, complete, exit_code, accepted, keys, metrics,"
                    " ingested, source, note) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, _stamp(day), src["path"], "pass", 1, 0, 1, src["keys"], json.dumps(stored),
                     src["ingested"], "benchmark-replica", f"replica of {source_run_id}"))
                nid = cur.lastrowid
                store.db.execute("INSERT INTO summary SELECT ?, component, metric, value FROM summary WHERE night=?",
                                 (nid, src["id"]))
                store.db.execute("INSERT INTO fleet SELECT ?, rail, metric, value, links FROM fleet WHERE night=?",
                                 (nid, src["id"]))
        done = start + len(chunk)
        say(f"  replicated {done}/{len(days)} nights ({time.perf_counter() - t:.1f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--nights", type=int, default=365, help="nights in the store, tonight included")
    ap.add_argument("--real", type=int, default=3, help="nights really ingested before the replicas (>= 2)")
    ap.add_argument("--quick", action="store_true", help="64 nodes x 2 rails x 20 nights (smoke run)")
    ap.add_argument("--keep", metavar="DIR", help="build the run folders and the store here and keep them")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.rails, args.nights = 64, 2, 20
    if args.real < 2 or args.nights < args.real + 2 or args.nodes < 12 or args.rails < 1:
        ap.error("need --real >= 2, --nights >= --real + 2, --nodes >= 12, --rails >= 1")

    names = node_names(args.nodes)
    rail = min(3, args.rails - 1)
    records = args.nodes * (args.nodes - 1) // 2 * args.rails
    link = f"{names[6]}:rail{rail}:{names[11]}"
    slow_nic = (names[4], rail, SLOW)
    tonight_day = args.nights - 1

    tmp = None
    if args.keep:
        root = Path(args.keep)
        root.mkdir(parents=True, exist_ok=True)
        if (root / "history").exists():
            ap.error(f"{root / 'history'} exists: --keep needs a folder without a store in it")
    else:
        tmp = tempfile.TemporaryDirectory(prefix="history_scale-")
        root = Path(tmp.name)
    try:
        say(f"history_scale: {args.nodes} nodes x {args.rails} rails ({records:,} links a night), "
            f"{args.nights} nights; in {root}")
        # ---- one night's folder -------------------------------------------------------------------
        t = time.perf_counter()
        base = make_run_fast(root / "run", nodes=args.nodes, rails=args.rails, seed=0)
        size = (base / "results.jsonl").stat().st_size
        say(f"generated {base} ({size / 2**20:.0f} MiB results.jsonl) in {time.perf_counter() - t:.1f} s (not timed)")
        say(f"this machine: json.loads {_json_loads_us(base):.1f} us per record "
            f"(the unit of benchmarks/report_scale.py's baseline); load average {_load()}")
        # What the run's own analysis leaves for the store (acceptance run / report write links.npz from
        # the records they have just parsed): the parse is the analysis's, not the ingest's.
        t = time.perf_counter()
        parsed_records = load_records(base)
        parsed = time.perf_counter() - t
        t = time.perf_counter()
        save_links(base, parsed_records)
        saved = time.perf_counter() - t
        del parsed_records
        say(f"the run's analysis: parsed results.jsonl in {parsed:.1f} s (its own work), then wrote links.npz "
            f"in {saved:.1f} s (not timed as ingest)")

        # ---- real ingests into an empty store: ingest time and growth ----------------------------
        store = Store.open(root / "history")
        ingests, sizes = [], []
        for day in range(args.real):
            say(f"ingesting {_run_id(day)} ({records:,} records) ...")
            ingests.append(_ingest(store, base, day))
            sizes.append(_disk_bytes(store.path))
            say(f"  {ingests[-1]:.1f} s; store {_mb(sizes[-1])} on disk after {day + 1} night(s)")
        store.pin(_run_id(0))
        growth = sizes[-1] / args.real
        marginal = (sizes[-1] - sizes[0]) / (args.real - 1)
        keys_bytes = _disk_bytes(store.path / "keys")

        # ---- the rest of the year: replicas of the first real night, then tonight for real -------
        say(f"replicating {_run_id(0)} as nights {args.real}..{tonight_day - 1} (the store's layout, not ingests) ...")
        _replicate(store, _run_id(0), range(args.real, tonight_day), seed=1)
        t = time.perf_counter()
        tonight_dir = make_run_fast(root / "tonight", nodes=args.nodes, rails=args.rails, seed=1, slow_nic=slow_nic)
        say(f"generated tonight's folder ({slow_nic[0]}'s NIC on rail {rail} x{SLOW}) in "
            f"{time.perf_counter() - t:.1f} s (not timed)")
        shutil.rmtree(base)
        say(f"ingesting tonight, {_run_id(tonight_day)}, into the {tonight_day}-night store, from results.jsonl "
            f"alone (a folder without links.npz: an older run, or one analyzed elsewhere) ...")
        parsed_ingest = _ingest(store, tonight_dir, tonight_day)
        say(f"  {parsed_ingest:.1f} s")
        year_bytes = _disk_bytes(store.path)
        store.close()

        # ---- one link's series over the year ------------------------------------------------------
        store = Store.open(root / "history", create=False)
        name = parse_name(link)
        calls = []
        for _ in range(SERIES_CALLS):
            t = time.perf_counter()
            s = store.series(name, METRIC)
            calls.append(time.perf_counter() - t)
        if len(s) != args.nights or s["value"].isna().any():
            raise SystemExit(f"history_scale: {link}'s series has {len(s)} values, expected {args.nights}")
        say(f"series {link}: {len(s)} nights, {calls[0]:.3f} s first call, "
            f"{sorted(calls)[len(calls) // 2]:.3f} s median of {SERIES_CALLS}")
        store.close()

        # ---- tonight judged: the fleet-wide drift scan --------------------------------------------
        store = Store.open(root / "history", create=False)
        tonight = store.night(_run_id(tonight_day))
        profile = run_profile(tonight_dir)
        say(f"judging {tonight['run_id']} against its history ...")
        t = time.perf_counter()
        findings, ref = check_night(store, tonight, profile)
        judged = time.perf_counter() - t
        k = profile.get("history.window")
        _, rails_of = nic_table(store)
        t = time.perf_counter()
        scan = drift_scan(store, tonight, ref, METRIC, True, profile.get("history.drift_tolerance"),
                          profile.get("history.noise_z"), rails_of)
        scan_s = time.perf_counter() - t
        store.close()
        say(f"  {judged:.1f} s (the drift scan alone {scan_s:.1f} s: {int(scan['drifted'].sum())} of {len(scan):,} "
            f"links drifted); pinned {ref.pinned and ref.pinned['run_id']}, rolling {len(ref.rolling)} nights "
            f"({ref.rolling[0]['run_id']} .. {ref.rolling[-1]['run_id']})")
        for f in findings:
            say(f"  {f['severity'].upper()} {f['kind']} {f['subject']}: {f['message']}")
        expected = f"{slow_nic[0]}:rail{rail}"
        if not any(f["kind"] == "drift" and f["subject"] == expected for f in findings):
            say(f"  note: no drift finding named {expected} (its NIC was slowed to x{SLOW})")

        # ---- the figures --------------------------------------------------------------------------
        worst = max(ingests)
        met = [worst <= TARGET_INGEST_S, growth <= TARGET_GROWTH_MB * 1e6, max(calls) <= TARGET_SERIES_S,
               judged <= TARGET_DRIFT_S]
        say("")
        say(f"ingest one night: {worst:.1f} s, worst of {len(ingests)} real ingests of {records:,}-record run folders "
            f"as acceptance run leaves them ({', '.join(f'{x:.1f}' for x in ingests)} s) "
            f"(target <= {TARGET_INGEST_S:.0f} s): {_verdict(met[0])}")
        say(f"  (a folder without links.npz, parsed at ingest: {parsed_ingest:.1f} s)")
        say(f"store growth: {growth / 1e6:.1f} MB a night, {_mb(sizes[-1])} on disk after {args.real} ingested "
            f"nights (each night after the first {_mb(marginal)}; the shared key array {_mb(keys_bytes)}) "
            f"(target <= {TARGET_GROWTH_MB:.0f} MB): {_verdict(met[1])}")
        say(f"one link's series: {max(calls):.3f} s, worst of {SERIES_CALLS} calls for {link} over {args.nights} "
            f"nights (target <= {TARGET_SERIES_S:.0f} s): {_verdict(met[2])}")
        say(f"fleet-wide drift scan: {judged:.1f} s, check_night() of tonight's {len(scan):,} links against the pinned "
            f"night and K={k} accepted nights (target <= {TARGET_DRIFT_S:.0f} s): {_verdict(met[3])}")
        say(f"the year's store: {year_bytes / 1e9:.2f} GB on disk for {args.nights} nights "
            f"({_mb(year_bytes / args.nights)} a night); one metric a night here (make_run_fast writes write "
            f"bandwidth only; a full night keeps 4 trend metrics, ~4x the columns)")
        say(f"load average now {_load()} (other work on the machine slows every figure)")
        say(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
        say(f"targets: {sum(met)}/4 met")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
