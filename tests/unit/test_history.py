"""The history store and its judge on synthetic nights: a drifting link found before the bound, a
flapping NIC found on a night it passes, ingest idempotent and safe under concurrent jobs, broken
and incomplete folders, store versions, a replaced NIC, runs.tsv imported, prune, and the CLI."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from acceptance.analysis.pipeline import run_profile
from acceptance.cli import main
from acceptance.history.components import parse_name
from acceptance.history.findings import accepted, check_night, uneven_planes
from acceptance.history.store import STORE_VERSION, Store, StoreError
from tests.synthetic import make_run

NIGHTLY = str(Path(__file__).resolve().parents[1] / "profiles" / "nightly.toml")
FIRST = datetime(2026, 1, 1, 2, tzinfo=timezone.utc)
LINK = "node03:rail1:node06"


def make_night(root: Path, n: int, **faults) -> Path:
    """Night n of an 8-node x 2-rail cluster: its own noise (seed n), its own date (day n)."""
    d = make_run(root / f"night{n:02d}", nodes=8, rails=2, seed=n, run_id=f"night{n:02d}", profile=NIGHTLY,
                 collectives=False, memreg=False, **faults)
    run = json.loads((d / "run.json").read_text())
    run["start"] = (FIRST + timedelta(days=n)).isoformat().replace("+00:00", "Z")
    (d / "run.json").write_text(json.dumps(run))
    return d


def check(store: Store, run_dir: Path) -> tuple[dict, list[dict]]:
    """What `history check` does: ingest, judge, keep the findings, accept a clean passing night."""
    store.ingest(run_dir)
    row = store.night(json.loads((run_dir / "run.json").read_text())["run_id"])
    found, ref = check_night(store, row, run_profile(run_dir))
    store.record_findings(row["id"], found)
    store.set_accepted(row["id"], accepted(row, found, uneven_planes(store, row, run_profile(run_dir), ref.pinned)))
    return row, found


def run_nights(root: Path, faults_of, nights: int = 14):
    store = Store.open(root / "history")
    out = []
    for n in range(nights):
        row, found = check(store, make_night(root, n, **faults_of(n)))
        if n == 0:
            store.pin(row["run_id"])
        out.append((row, found))
    return store, out


@pytest.fixture(scope="module")
def drifting(tmp_path_factory):
    """One link losing 2.5% a night, night 0 pinned, every other link noise."""
    root = tmp_path_factory.mktemp("drift")
    store, nights = run_nights(root, lambda n: {"slow_link": ("node03", "node06", 1, 1 - 0.025 * n)} if n else {})
    return root, store, nights


def test_a_link_losing_2_5_percent_a_night_drifts_before_the_bound_and_nothing_else(drifting):
    _, _, nights = drifting
    found = [(n, f) for n, (_, fs) in enumerate(nights) for f in fs]
    assert {f["subject"] for _, f in found} == {LINK}, [(n, f["kind"], f["subject"]) for n, f in found]
    assert {f["kind"] for _, f in found} == {"drift"}
    # 5% tolerance: the cumulative loss passes it on night 3 (7.5%; night 2 is 5.0%), where it warns
    # (its first night beyond the tolerance); it fails from the next night on, having held 2 nights.
    first = found[0][0]
    assert first <= 3 and found[0][1]["severity"] == "warn"
    failing = [n for n, f in found if f["severity"] == "fail"]
    assert failing and failing[0] <= 4 and nights[failing[0] - 1][1], "a drift fails once it held 2 nights"
    assert nights[failing[0]][0]["verdict"] == "pass", "the run itself (bound, fleet) must not have caught it yet"
    # Every night after it until the run's own checks name the link fails it.
    for n in range(failing[0], 14):
        row, fs = nights[n]
        if row["verdict"] == "fail":
            assert fs == [], "a part failing its own checks gets no drift finding on top"
            break
        assert [f["severity"] for f in fs] == ["fail"], n
    else:
        pytest.fail("the absolute bound (320 Gbit/s) must catch the link by night 6")
    assert n <= 6
    drift = next(f for _, f in found if f["severity"] == "fail")
    assert drift["scope"] == "link" and drift["node"] == "node03" and drift["peer"] == "node06" and drift["rail"] == 1
    assert drift["series"][0]["pinned"] and drift["series"][-1]["tonight"]
    assert [s["date"] for s in drift["series"]][0] == "2026-01-01"
    assert drift["evidence"][0].startswith("series: 2026-01-01")
    assert "pinned reference: night00 (2026-01-01)" in drift["evidence"]


def test_failing_drift_nights_are_not_accepted_so_the_rolling_median_cannot_creep(drifting):
    _, store, nights = drifting
    accepted = dict(zip(store.nights()["run_id"], store.nights()["accepted"]))
    severities = [{f["severity"] for f in fs if f["kind"] == "drift"} for _, fs in nights]
    assert {"warn"} in severities and {"fail"} in severities
    for (row, _), kinds in zip(nights, severities):
        assert accepted[row["run_id"]] == (row["verdict"] == "pass" and "fail" not in kinds), row["run_id"]


def test_one_stalled_night_warns_and_a_drift_that_holds_fails_even_as_it_moves_to_the_nic(tmp_path):
    # Night 3: a link 11.5% slow (beyond twice the 5% tolerance, above the run's own bound), then clean:
    # a stall. Night 5: another link as slow, night 6 its NIC (every link of node03 on rail 1): the same
    # part held 2 nights.
    slow, stalled = 0.885, "node01:rail0:node02"
    faults = {3: {"slow_link": ("node01", "node02", 0, slow)}, 5: {"slow_link": ("node03", "node06", 1, slow)},
              6: {"slow_nic": ("node03", 1, slow)}}
    store, nights = run_nights(tmp_path, lambda n: faults.get(n, {}), nights=7)
    kinds = [[(f["kind"], f["severity"], f["subject"]) for f in fs] for _, fs in nights]
    assert kinds[3] == [("drift", "warn", stalled)] and kinds[4] == [], kinds
    assert "night 1 of 2 in a row" in nights[3][1][0]["message"]
    assert kinds[5] == [("drift", "warn", LINK)] and kinds[6] == [("drift", "fail", "node03:rail1")], kinds
    accepted = list(store.nights()["accepted"])
    assert accepted == [1, 1, 1, 1, 1, 1, 0], "a night whose drift only warned stays a reference"
    # The store keeps each finding's component as fields, not only its subject string.
    rows = store.db.execute("SELECT node, rail, peer FROM findings WHERE kind='drift' ORDER BY night").fetchall()
    assert rows == [("node01", 0, "node02"), ("node03", 1, "node06"), ("node03", 1, None)]


def test_a_nic_failing_every_third_night_is_intermittent_on_a_night_it_passes(tmp_path):
    store, nights = run_nights(tmp_path, lambda n: {"slow_nic": ("node05", 0, 0.6)} if n % 3 == 1 else {}, nights=8)
    subjects = {f["subject"] for _, fs in nights for f in fs}
    assert subjects == {"node05:rail0"}, subjects
    assert [f["kind"] for f in nights[1][1]] == []            # its first failure: the run's own finding says it
    assert [f["kind"] for f in nights[2][1]] == ["recovered"]  # passes again: resume it
    assert "State=RESUME" in " ".join(nights[2][1][0]["evidence"] + [nights[2][1][0]["message"]]) \
        or nights[2][1][0].get("action")
    passing = [(n, fs) for n, (row, fs) in enumerate(nights) if row["verdict"] == "pass" and n > 4]
    assert passing
    for n, fs in passing:
        assert [(f["kind"], f["severity"]) for f in fs] == [("intermittent", "fail")], n
    flap = passing[0][1][0]
    assert [s["verdict"] for s in flap["series"] if not s["pinned"]][:4] == ["fail", "pass", "pass", "fail"]


def test_ingest_is_idempotent(tmp_path, capsys):
    d = make_night(tmp_path, 0)
    assert main(["history", "ingest", str(d), "--history", str(tmp_path / "h")]) == 0
    assert main(["history", "ingest", str(d), str(d), "--history", str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    assert out.count("kept as night") == 1 and out.count("counted once") == 2
    assert len(Store.open(tmp_path / "h").nights()) == 1


def _ingest(args):
    store, run_dir = args
    return Store.open(store).ingest(run_dir).night


def test_two_jobs_ingesting_at_once_lose_nothing(tmp_path):
    dirs = [make_night(tmp_path, n) for n in range(4)]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        nights = pool.map(_ingest, [(tmp_path / "h", d) for d in dirs])
    store = Store.open(tmp_path / "h")
    assert sorted(store.nights()["run_id"]) == [f"night{n:02d}" for n in range(4)]
    assert len(set(nights)) == 4
    # One component per NIC, however the two jobs interleaved: every night's link has one series.
    nics = store.db.execute("SELECT count(*) FROM components WHERE kind='nic'").fetchone()[0]
    assert nics == 16
    assert store.series(parse_name(LINK), "rdma_write.bandwidth")["night"].nunique() == 4


def test_an_incomplete_run_is_kept_as_incomplete_and_never_accepted(tmp_path, capsys):
    d = make_night(tmp_path, 0)
    run = json.loads((d / "run.json").read_text())
    run.update(complete=False, exit_code=3, missing_ranks=[5])
    (d / "run.json").write_text(json.dumps(run))
    assert main(["history", "check", str(d), "--history", str(tmp_path / "h")]) == 3
    row = Store.open(tmp_path / "h").night("night00")
    assert row["verdict"] == "incomplete" and row["accepted"] == 0 and row["complete"] == 0
    assert main(["history", "pin", str(d), "--history", str(tmp_path / "h")]) == 2
    assert "cannot be the reference" in capsys.readouterr().err


def test_a_node_lost_on_two_nights_is_intermittent(tmp_path, capsys):
    """Issue 42: a node lost during a run (its rank died) is a finding of that night; lost again on another
    of the last nights, complete or not, it fails as intermittent: repair it rather than resume it."""
    from acceptance.analysis import analyze
    from acceptance.analysis.output import write_outputs

    def lost_night(n):
        d = make_night(tmp_path, n)
        run = json.loads((d / "run.json").read_text())
        run.update(complete=False, exit_code=3, missing_ranks=[4], lost_nodes=["node03"],
                   lost="this machine: rank 4 on node03 ended first (signal 9)")
        (d / "run.json").write_text(json.dumps(run))
        write_outputs(d, analyze(d))  # what `acceptance run` writes after an incomplete run
        return d

    h = str(tmp_path / "h")
    assert main(["history", "check", str(lost_night(0)), "--history", h]) == 3
    assert "FAIL intermittent" not in capsys.readouterr().out  # lost once: that night's own finding only
    assert main(["history", "check", str(make_night(tmp_path, 1)), "--history", h]) == 0
    assert main(["history", "check", str(lost_night(2)), "--history", h]) == 3
    out = capsys.readouterr().out
    assert "FAIL intermittent node03: node03 was lost on 2 of the last 3 nights: drain node03 and repair it" in out
    judged = json.loads((tmp_path / "night02" / "history.json").read_text())
    (f,) = [f for f in judged["findings"] if f["kind"] == "intermittent"]
    assert [p["value"] for p in f["series"]] == [1.0, 0.0, 1.0]


@pytest.mark.odd_records
@pytest.mark.parametrize("broken, named", [
    ("run.json", "run.json"),
    ("results.jsonl", "results.jsonl"),
    ("findings.json", "findings.json"),
    ("no run.json", "run.json: no such file"),
])
def test_a_folder_whose_files_do_not_parse_is_refused_naming_the_file(tmp_path, capsys, broken, named):
    d = make_night(tmp_path, 0)
    if broken == "no run.json":
        (d / "run.json").unlink()
    elif broken == "results.jsonl":
        lines = (d / "results.jsonl").read_text().splitlines(keepends=True)
        lines.insert(10, '{"test": "x", "value": \n')  # not the last line: that one is a crash mid-write
        (d / "results.jsonl").write_text("".join(lines))
    else:
        (d / broken).write_text("{not json")
    assert main(["history", "ingest", str(d), "--history", str(tmp_path / "h")]) == 2
    out = capsys.readouterr()
    assert named in out.out + out.err
    assert Store.open(tmp_path / "h").nights().empty


def test_a_store_from_a_newer_version_is_refused(tmp_path):
    Store.open(tmp_path / "h").close()
    db = sqlite3.connect(tmp_path / "h" / "history.db")
    db.execute("UPDATE meta SET value=? WHERE key='version'", (str(STORE_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer acceptance"):
        Store.open(tmp_path / "h")
    assert main(["history", "worst", "--history", str(tmp_path / "h")]) == 2


def test_a_version_1_store_gains_its_findings_components_as_fields(tmp_path):
    Store.open(tmp_path / "h").close()
    db = sqlite3.connect(tmp_path / "h" / "history.db")
    db.executescript("DROP TABLE findings; CREATE TABLE findings(night INTEGER NOT NULL, subject TEXT NOT NULL, "
                     "severity TEXT, kind TEXT, scope TEXT, metric TEXT, message TEXT);"
                     "UPDATE meta SET value='1' WHERE key='version';")
    db.executemany("INSERT INTO findings VALUES (1, ?, 'fail', ?, ?, NULL, '')",
                   [(LINK, "outlier", "link"), ("node05:rail0", "drift", "nic"), ("switch:leaf2:rail1", "uplink",
                                                                                  "switch")])
    db.commit()
    db.close()
    store = Store.open(tmp_path / "h")
    assert store.meta("version") == str(STORE_VERSION)
    got = store.findings([1]).set_index("subject")[["node", "rail", "peer"]].astype(object)
    assert list(got.loc[LINK]) == ["node03", 1, "node06"] and list(got.loc["node05:rail0"])[:2] == ["node05", 0]
    assert got.loc["switch:leaf2:rail1"].isna().all()


def test_a_file_where_the_store_should_be_is_refused(tmp_path):
    (tmp_path / "h").write_text("")
    with pytest.raises(StoreError, match="is a folder"):
        Store.open(tmp_path / "h")


def _identity(guid_of_node05_rail0: str) -> dict:
    return {f"node{i:02d}": {"serial": f"SN{i}", "nics": {
        str(r): {"device": f"mlx5_{r}", "guid": guid_of_node05_rail0 if (i, r) == (5, 0) else f"0c42:{i:04x}:{r:04x}:0001",
                 "port": 1, "fw": "28.39.1002"} for r in range(2)}} for i in range(1, 9)}


def test_a_nic_replaced_under_the_same_name_starts_a_new_series(tmp_path, capsys):
    h = str(tmp_path / "h")
    for n in range(4):
        d = make_night(tmp_path, n)
        run = json.loads((d / "run.json").read_text())
        run["identity"] = _identity("0c42:aaaa:0000:0001" if n < 2 else "0c42:bbbb:0000:0002")
        (d / "run.json").write_text(json.dumps(run))
        assert main(["history", "ingest", str(d), "--history", h]) == 0
    out = capsys.readouterr().out
    assert "night02: kept" in out and "node05:rail0: a different part than before" in out
    store = Store.open(h)
    parts = store.components(parse_name("node05:rail0"))
    assert [p["guid"] for p in parts] == ["0c42:aaaa:0000:0001", "0c42:bbbb:0000:0002"]
    assert parts[0]["replaced_by"] == parts[1]["id"] and parts[1]["first_night"] == store.night("night02")["id"]
    s = store.series(parse_name("node02:rail0:node05"), "rdma_write.bandwidth")
    assert s["part"].nunique() == 2 and len(s) == 4
    assert main(["history", "show", "node02:rail0:node05", "--history", h]) == 0
    assert "replaced: a new part from here" in capsys.readouterr().out
    # The other rail's NIC of the same node is the same part throughout.
    assert len(store.components(parse_name("node05:rail1"))) == 1


def test_an_older_runs_tsv_is_imported_once(tmp_path):
    h = tmp_path / "h"
    h.mkdir()
    kept, gone = make_night(tmp_path, 0), tmp_path / "night01"
    (h / "runs.tsv").write_text(f"2026-01-01T02:00:00Z\t{kept}\t0\n2026-01-02T02:00:00Z\t{gone}\t1\n")
    store = Store.open(h)
    nights = store.nights().set_index("run_id")
    assert nights.loc["night00", "verdict"] == "pass" and nights.loc["night00", "source"] == "runs.tsv"
    assert nights.loc["night01", "verdict"] == "fail" and nights.loc["night01", "accepted"] == 0
    assert "not readable" in nights.loc["night01", "note"]
    assert not (h / "runs.tsv").exists() and (h / "runs.tsv.imported").exists()
    store.close()
    assert len(Store.open(h).nights()) == 2


def test_prune_drops_old_nights_and_their_columns_but_never_the_pinned_one(tmp_path, capsys):
    h = str(tmp_path / "h")
    for n in range(3):
        assert main(["history", "ingest", str(make_night(tmp_path, n)), "--history", h]) == 0
    assert main(["history", "pin", str(tmp_path / "night00"), "--history", h]) == 0
    files = lambda: sorted(p.name for p in (tmp_path / "h" / "nights").iterdir())  # noqa: E731
    assert any(f.startswith("night01") for f in files())
    assert main(["history", "prune", "--keep", "1d", "--history", h]) == 0  # every night is months old
    assert "dropped 2 night(s)" in capsys.readouterr().out
    store = Store.open(h)
    assert list(store.nights()["run_id"]) == ["night00"]
    assert all(f.startswith("night00") for f in files())
    assert len(list((tmp_path / "h" / "keys").iterdir())) == 1


def test_check_show_worst_and_plot_through_the_cli(drifting, capsys, tmp_path):
    root, store, nights = drifting
    h = str(store.path)
    assert main(["history", "check", str(root / "night04"), "--history", h]) == 1
    out = capsys.readouterr().out
    assert f"FAIL drift {LINK}" in out and "the pinned run night00" in out
    written = json.loads((root / "night04" / "history.json").read_text())
    assert written["pinned"] == "night00" and [f["subject"] for f in written["findings"]] == [LINK]
    png = tmp_path / "link.png"
    assert main(["history", "show", LINK, "--history", h, "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "14 nights" in out and "drift:fail" in out and png.stat().st_size > 1000
    assert main(["history", "show", "node03:rail1", "--history", h, "--metric", "all"]) == 0
    assert "rdma_write.latency_p99" in capsys.readouterr().out
    assert main(["history", "show", "rail1", "--history", h]) == 0
    assert main(["history", "worst", "--since", "3650d", "--history", h]) == 0
    worst = capsys.readouterr().out.splitlines()
    row = next(i for i, line in enumerate(worst) if "component" in line) + 1
    assert worst[row].split()[0] == LINK


@pytest.mark.parametrize("bad", ["node07:rail", "node07:rail3:node07", ":rail3", "a:b:c:d"])
def test_show_names_what_a_component_looks_like(tmp_path, capsys, bad):
    Store.open(tmp_path / "h").close()
    assert main(["history", "show", bad, "--history", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert "node07:rail3:node12" in err or "two different nodes" in err


def test_show_on_a_folder_with_no_store_says_how_to_make_one(tmp_path, capsys):
    assert main(["history", "show", "node01", "--history", str(tmp_path / "none")]) == 2
    assert "history ingest" in capsys.readouterr().err


def test_parse_name_is_canonical():
    assert str(parse_name("node12:rail3:node07")) == "node07:rail3:node12"
    assert parse_name("node07:rail3").kind == "nic" and parse_name("rail3").rail == 3
    assert parse_name("fleet").kind == "fleet" and parse_name("node07").node == "node07"
    with pytest.raises(ValueError):
        parse_name("node07:nic3")


def test_links_npz_gives_the_night_its_records_give_and_a_changed_results_jsonl_is_parsed_anew(tmp_path):
    from acceptance.analysis.load import load_records
    from acceptance.history.night import LINKS_FILE, load_links, read_night, save_links
    d = make_night(tmp_path, 1, slow_link=("node03", "node06", 1, 0.9))
    parsed = read_night(d)
    assert save_links(d, load_records(d)) == d / LINKS_FILE
    kept = read_night(d)
    assert kept.names == parsed.names and kept.rails == parsed.rails and kept.units == parsed.units
    assert sorted(kept.links) == sorted(parsed.links) == [
        "rdma_write.bandwidth", "rdma_write.latency_p50", "rdma_write.latency_p99"]
    for metric, frame in parsed.links.items():
        assert kept.links[metric].reset_index(drop=True).equals(frame.reset_index(drop=True)), metric
    with open(d / "results.jsonl", "a") as fh:  # the records changed: links.npz no longer speaks for them
        fh.write((d / "results.jsonl").read_text().splitlines()[0] + "\n")
    assert load_links(d) is None
    (d / LINKS_FILE).write_bytes(b"not a zip")  # unreadable: the records are parsed, never refused
    assert read_night(d).links.keys() == parsed.links.keys()


def test_acceptance_report_leaves_links_npz_for_the_store(tmp_path):
    from acceptance.history.night import LINKS_FILE, load_links
    d = make_night(tmp_path, 0)
    assert main(["report", str(d), "-o", str(tmp_path / "r.html")]) == 0
    assert (d / LINKS_FILE).is_file() and load_links(d) is not None


def test_pinning_a_night_whose_rail_plane_was_slow_says_so(tmp_path, capsys):
    even, uneven = make_night(tmp_path, 0), make_night(tmp_path, 1, slow_rail=(1, 0.8))
    assert main(["history", "pin", str(even), "--history", str(tmp_path / "h")]) == 0
    assert "note:" not in capsys.readouterr().out
    assert main(["history", "pin", str(uneven), "--history", str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    assert "pinned night01" in out and "note: rail 1's median rdma_write.bandwidth" in out and "worse" in out, out
    assert "rail 0's" not in out


def test_the_nightly_pin_waits_for_an_even_night_and_an_uneven_one_is_no_reference(tmp_path, capsys):
    """A plane stalled for a night moves every link on it: such a night is neither pinned by the nightly
    job (pin --if-none) nor accepted into the rolling median; a gap the pinned night had too is by design."""
    h = str(tmp_path / "h")
    uneven = make_night(tmp_path, 0, slow_rail=(1, 0.9))
    assert main(["history", "check", str(uneven), "--history", h]) == 0
    out = capsys.readouterr().out
    assert "is not a reference night" in out and "rail 1's median rdma_write.bandwidth was 10% worse" in out, out
    assert json.loads((uneven / "history.json").read_text())["accepted"] is False
    assert main(["history", "pin", str(uneven), "--history", h, "--if-none"]) == 0
    assert "history: not pinned" in capsys.readouterr().out
    even = make_night(tmp_path, 1)
    assert main(["history", "check", str(even), "--history", h]) == 0
    assert json.loads((even / "history.json").read_text())["accepted"] is True
    assert main(["history", "pin", str(even), "--history", h, "--if-none"]) == 0
    assert "history: pinned night01" in capsys.readouterr().out
    store = Store.open(tmp_path / "h", create=False)
    assert list(store.nights()["accepted"]) == [0, 1] and list(store.nights()["pinned"]) == [0, 1]
    # Pinned by hand, a plane slow by design sets the gap: a later night with the same gap is even.
    assert main(["history", "pin", str(uneven), "--history", h]) == 0
    assert "note: rail 1's" in capsys.readouterr().out
    again = make_night(tmp_path, 2, slow_rail=(1, 0.9))
    main(["history", "check", str(again), "--history", h])
    judged = json.loads((again / "history.json").read_text())
    assert judged["uneven"] == [] and judged["accepted"] is True, judged
