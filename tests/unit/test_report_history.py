"""`acceptance report RUN_DIR --history PATH`: the History section (the store's per-rail and fleet trend,
a sparkline per drifting or intermittent part from RUN_DIR/history.json), on a small store of synthetic
nights (tests/history_nights.py), and a --history that is not a store."""

from __future__ import annotations

import base64
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import history_nights  # noqa: E402
from history_nights import DRIFTING, FLAPPING  # noqa: E402

from acceptance.analysis import analyze  # noqa: E402
from acceptance.cli import main  # noqa: E402
from acceptance.history.components import parse_name  # noqa: E402
from acceptance.history.store import Store  # noqa: E402
from acceptance.report import render  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
METRIC = "rdma_write.bandwidth"


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    return history_nights.make_nights(tmp_path_factory.mktemp("history"))


def _section(html: str) -> str:
    start = html.index('<section id="history">')
    return html[start:html.index("</section>", start)]


def _rows(table_html: str) -> list[list[str]]:
    """The text of each body row's cells."""
    body = table_html[table_html.index("<tbody>"):table_html.index("</tbody>")]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]


def _table(section: str, cls: str) -> str:
    start = section.index(f'<table class="{cls}')
    return section[start:section.index("</table>", start)]


def _images(html: str) -> dict[str, bytes]:
    """alt -> PNG bytes of every embedded image."""
    return {alt: base64.b64decode(uri) for uri, alt in
            re.findall(r'<img src="data:image/png;base64,([^"]+)" alt="([^"]*)"', html)}


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to)
    return to


def test_fleet_series_is_the_stores_rail_and_fleet_medians(nights):
    store = Store.open(nights.store, create=False)
    try:
        s = store.fleet_series(METRIC)
        assert list(s.drop_duplicates("night")["run_id"]) == [f"night-{n}" for n in range(6)]
        assert sorted(s["rail"].unique()) == [-1, 0, 1] and set(s["metric"]) == {METRIC}
        for rail, name in ((1, "rail1"), (-1, "fleet")):
            one = store.series(parse_name(name), METRIC)
            assert list(s[s["rail"] == rail]["value"]) == pytest.approx(list(one["value"]))
        assert s[s["pinned"] == 1]["run_id"].unique().tolist() == ["night-0"]
        assert set(store.fleet_series()["metric"]) >= {METRIC}
    finally:
        store.close()


@pytest.fixture(scope="module")
def reported(nights, tmp_path_factory):
    """night-4 reported as the nightly job does: --history and --prometheus; (run folder, html, prom text)."""
    run = _copy(nights.tonight, tmp_path_factory.mktemp("reported") / "night-4")
    prom = run.parent / "acceptance.prom"
    code = main(["report", str(run), "--history", str(nights.store), "--prometheus", str(prom)])
    assert code in (0, 1)
    return run, (run / "report.html").read_text(), prom.read_text()


def test_history_section_trend_per_rail_and_the_fleet(nights, reported):
    _, html, _ = reported
    assert '<a href="#history">History</a>' in html
    sec = _section(html)
    assert "<h2>History</h2>" in sec and str(nights.store.resolve()) in sec
    assert "against the pinned run night-0 and the median of the last 2 accepted night(s)" in sec
    # every rail and the fleet, night-0 .. night-4 (night-5 is later than this night: left out)
    rows = _rows(_table(sec, "history-trend"))
    assert [r[0] for r in rows] == ["rail 0", "rail 1", "fleet"]
    assert all(r[1] == "5" for r in rows)
    store = Store.open(nights.store, create=False)
    try:
        s = store.fleet_series(METRIC)
    finally:
        store.close()
    for r, rail in zip(rows, (0, 1, -1)):
        g = s[s["rail"] == rail].set_index("run_id")["value"]
        pinned, before, tonight = (float(x.split()[0]) for x in r[2:5])
        assert pinned == pytest.approx(g["night-0"], rel=1e-3)
        assert before == pytest.approx(g["night-3"], rel=1e-3)
        assert tonight == pytest.approx(g["night-4"], rel=1e-3)
        assert r[2].endswith("Gbit/s") and re.fullmatch(r"[+-]\d+\.\d%", r[5])
    trend = [(alt, png) for alt, png in _images(sec).items() if alt.startswith("median write bandwidth")]
    assert [alt for alt, _ in trend] == ["median write bandwidth at 8MiB per rail plane and the fleet, night by "
                                         "night; 5 nights from 2026-01-01 to 2026-01-05"]
    assert trend[0][1].startswith(PNG)
    assert "<script" not in html and "http://" not in html and "https://" not in html   # still self-contained
    assert all(b"http" not in png for png in _images(sec).values())


def test_history_section_sparkline_per_drifting_or_intermittent_part(reported):
    run, html, _ = reported
    sec = _section(html)
    parts = _rows(_table(sec, "history-parts"))
    assert [(p[1], p[0]) for p in parts] == [(DRIFTING, "FAILdrift"), (FLAPPING, "FAILintermittent")]
    drift, flap = parts
    assert drift[3] == "2026-01-01 → 2026-01-05" and drift[4].endswith("(tonight) Gbit/s")
    assert "(pinned) → " in drift[4]
    assert drift[5].startswith("link node01 -&gt; node03 on rail 1 drifted")
    assert flap[4] == "findings on 2 of 5 nights" and "is intermittent" in flap[5]
    images = _images(sec)
    for subject, kind in ((DRIFTING, "drift"), (FLAPPING, "intermittent")):
        [png] = [v for alt, v in images.items() if alt.startswith(f"{subject}: {kind} over 5 nights")]
        assert png.startswith(PNG) and len(png) < 20_000
    check = json.loads((run / "history.json").read_text())
    assert {f["subject"] for f in check["findings"] if f["kind"] in ("drift", "intermittent")} == {DRIFTING, FLAPPING}
    assert "has not been run" not in sec


def test_report_prometheus_carries_the_history_findings(reported):
    _, _, text = reported
    assert ('acceptance_history_finding{run_id="night-4",profile="nightly",kind="drift",severity="fail",'
            f'subject="{DRIFTING}",scope="link",node="node01",rail="1",peer="node03",metric="bandwidth"}} 1') in text
    assert ('acceptance_history_finding{run_id="night-4",profile="nightly",kind="intermittent",severity="fail",'
            f'subject="{FLAPPING}",scope="nic",node="node04",rail="0"}} 1') in text
    assert 'acceptance_history_findings{run_id="night-4",profile="nightly",kind="recovered",severity="warn"} 0' in text


def test_without_history_json_the_trend_shows_and_the_check_is_missing(nights, tmp_path):
    run = _copy(nights.runs[5], tmp_path / "night-5")   # ingested, never checked
    assert not (run / "history.json").exists()
    assert main(["report", str(run), "--history", str(nights.store)]) == 0
    sec = _section((run / "report.html").read_text())
    assert f"acceptance history check {run} has not been run for this night" in sec
    assert [r[0] for r in _rows(_table(sec, "history-trend"))] == ["rail 0", "rail 1", "fleet"]
    assert all(r[1] == "6" for r in _rows(_table(sec, "history-trend")))   # tonight (night-5) last
    assert "history-parts" not in sec
    assert [alt for alt in _images(sec)] == ["median write bandwidth at 8MiB per rail plane and the fleet, night by "
                                             "night; 6 nights from 2026-01-01 to 2026-01-06"]


def test_a_run_not_in_the_store_and_a_history_json_of_another_run(nights, tmp_path):
    run = history_nights.night(tmp_path, 7)
    shutil.copy(nights.tonight / "history.json", run / "history.json")     # night-4's check, not night-7's
    analysis = analyze(run)
    store = Store.open(nights.store, create=False)
    try:
        sec = _section(render(analysis, run, history=store).read_text())
    finally:
        store.close()
    assert "This run (night-7) is not in the store" in sec
    assert "history.json is the history check of run night-4, not of this run (night-7)" in sec
    assert "history-parts" not in sec and DRIFTING not in sec
    assert all(r[4] == "–" for r in _rows(_table(sec, "history-trend")))     # no tonight


def test_history_text_is_escaped(nights, tmp_path):
    run = _copy(nights.tonight, tmp_path / "night-4")
    check = json.loads((run / "history.json").read_text())
    check["findings"][0]["message"] = '<script>alert("x")</script> & more'
    check["findings"][0]["subject"] = "node01:rail1:<b>node03</b>"
    (run / "history.json").write_text(json.dumps(check))
    store = Store.open(nights.store, create=False)
    try:
        html = render(analyze(run), run, history=store).read_text()
    finally:
        store.close()
    sec = _section(html)
    assert "<script>" not in html and "<b>node03" not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; more" in sec
    assert "node01:rail1:&lt;b&gt;node03&lt;/b&gt;" in sec


def test_an_unreadable_history_json_is_a_note_not_a_failure(nights, tmp_path, capsys):
    run = _copy(nights.tonight, tmp_path / "night-4")
    (run / "history.json").write_text('{"findings": [')
    prom = tmp_path / "acceptance.prom"
    assert main(["report", str(run), "--history", str(nights.store), "--prometheus", str(prom)]) in (0, 1)
    err = capsys.readouterr().err
    assert f"acceptance: note: no history findings exported: {run / 'history.json'}: not valid JSON" in err
    sec = _section((run / "report.html").read_text())
    assert f"{run / 'history.json'}: not valid JSON" in sec and "history-parts" not in sec
    assert [r[0] for r in _rows(_table(sec, "history-trend"))] == ["rail 0", "rail 1", "fleet"]
    assert "acceptance_history_" not in prom.read_text()


def test_a_history_that_is_not_a_store_is_exit_2_naming_it(nights, tmp_path, capsys):
    run = _copy(nights.runs[2], tmp_path / "night-2")
    (run / "report.html").unlink(missing_ok=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "history.db").write_text("not sqlite\n")
    (tmp_path / "file").write_text("x\n")
    cases = {tmp_path / "missing": "no such folder", tmp_path / "empty": "no history store here",
             tmp_path / "junk": "not an acceptance history store", tmp_path / "file": "is a folder, and this is a file"}
    for path, words in cases.items():
        assert main(["report", str(run), "--history", str(path)]) == 2
        err = capsys.readouterr().err
        assert "acceptance: --history" in err and str(path) in err and words in err, err
        assert "Traceback" not in err
    assert not (run / "report.html").exists()          # refused before the analysis
    assert not (tmp_path / "missing").exists() and not (tmp_path / "empty" / "history.db").exists()
