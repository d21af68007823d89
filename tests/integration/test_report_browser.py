"""The HTML report in a real headless Chromium, driven over the Chrome DevTools Protocol.

A real run (`acceptance run`, 4 local MPI ranks as 2 nodes x 2 rails) is analysed and
rendered; Chromium loads the file:// page and we check: no console errors or
exceptions, no network request other than the file itself and data: URIs, the verdict
banner, the findings section and at least one decoded heatmap image, and a
screenshot saved next to the report (report.png).

CDP runs over --remote-debugging-pipe (fd 3: commands to the browser, fd 4: its
replies and events; JSON messages separated by NUL), so no websocket library is
needed. Every wait is bounded and the browser is always killed.
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(),
                                reason=f"{CHROMIUM} is missing (Debian package chromium; `make test` installs it as root)")


class CDPError(RuntimeError):
    pass


class Browser:
    """Chromium headless with a CDP session over a pipe."""

    FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe"]

    def __init__(self, profile_dir: Path, timeout: float = 30.0):
        self.timeout = timeout
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def child_fds():  # the browser reads commands on fd 3 and writes replies on fd 4
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        with open(profile_dir / "chromium.log", "wb") as log:
            self.proc = subprocess.Popen([str(CHROMIUM), *self.FLAGS, f"--user-data-dir={profile_dir}",
                                          "about:blank"],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                         pass_fds=(3, 4), preexec_fn=child_fds, start_new_session=True)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    # --- transport ---
    def _read_message(self, deadline: float) -> dict | None:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._from_browser], [], [], min(left, 0.5))
            if not ready:
                if self.proc.poll() is not None:
                    raise CDPError(f"chromium exited with {self.proc.returncode}")
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise CDPError("chromium closed the debugging pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply is None:
                raise CDPError(f"no reply to {method} within {timeout or self.timeout} s")
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str, timeout: float) -> dict:
        for event in self.events:
            if event["method"] == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._read_message(deadline)
            if event is None:
                raise CDPError(f"no {method} event within {timeout} s")
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    return event

    def pump(self, seconds: float) -> None:
        """Collect events for a while (late console messages, requests)."""
        deadline = time.monotonic() + seconds
        while (event := self._read_message(deadline)) is not None:
            if "method" in event:
                self.events.append(event)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    os.write(self._to_browser, json.dumps({"id": 10**6, "method": "Browser.close"}).encode() + b"\0")
                except OSError:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, 9)  # the browser's own process group: it and its helpers only
                self.proc.wait(timeout=10)
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass


def load_page(html: Path, profile_dir: Path, screenshot: Path) -> dict:
    """Open the report in Chromium; return console errors, requests and page facts; save a screenshot."""
    browser = Browser(profile_dir)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.events.clear()
        url = html.resolve().as_uri()
        nav = browser.send("Page.navigate", {"url": url}, session=session)
        assert not nav.get("errorText"), nav
        browser.wait_event("Page.loadEventFired", timeout=30)
        # every image decoded (data URIs), then a short settle for late console messages
        ready = browser.send("Runtime.evaluate", {
            "expression": "Promise.all([...document.images].map(i => i.decode().catch(() => null))).then(() => true)",
            "awaitPromise": True, "returnByValue": True}, session=session, timeout=30)
        assert ready.get("result", {}).get("value") is True, ready
        browser.pump(0.5)
        facts_js = """(() => {
            const banner = document.querySelector('#verdict');
            const findings = document.querySelector('#findings');
            const heat = [...document.querySelectorAll('#heatmaps img')];
            return {
              title: document.title,
              banner: banner ? banner.innerText : null,
              bannerVisible: banner ? banner.getBoundingClientRect().height > 0 : false,
              findings: findings ? findings.innerText : null,
              heatmaps: heat.length,
              heatmapsDecoded: heat.filter(i => i.complete && i.naturalWidth > 0).length,
              images: [...document.images].map(i => ({src: i.src.slice(0, 22), w: i.naturalWidth})),
              scripts: document.scripts.length,
              height: document.documentElement.scrollHeight,
            };
        })()"""
        facts = browser.send("Runtime.evaluate", {"expression": facts_js, "returnByValue": True},
                             session=session)["result"]["value"]
        # full-page screenshot
        height = min(int(facts["height"]), 16000)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        shot = browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                            session=session, timeout=60)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        browser.pump(0.2)
        errors, requests = [], []
        for event in browser.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                errors.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                          for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                errors.append("exception: " + json.dumps(params.get("exceptionDetails", {}))[:500])
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                errors.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url', '')})")
            elif method == "Network.requestWillBeSent":
                requests.append(params["request"]["url"])
        return {"url": url, "errors": errors, "requests": requests, "facts": facts}
    finally:
        browser.close()


# --- building the Analysis from a real run -----------------------------------------

def analysis_of(run_dir: Path):
    """acceptance.analysis.analyze(run_dir) when implemented; else a minimal Analysis from results.jsonl."""
    import acceptance.analysis as analysis_module

    analyze = getattr(analysis_module, "analyze", None)
    if analyze is not None:
        try:
            return analyze(run_dir), "analyze()"
        except (NotImplementedError, AttributeError):
            pass
    import pandas as pd

    from acceptance.analysis import Analysis
    from acceptance.rules.profile import Profile, load_profile

    run = json.loads((run_dir / "run.json").read_text())
    try:
        profile = Profile(**run["profile"])
    except (KeyError, TypeError):
        profile = load_profile(None)
    records = pd.read_json(run_dir / "results.jsonl", lines=True, dtype=False)
    pairs = records["nodes"].str.len() == 2
    records["src"] = records["nodes"].str[0]
    records["dst"] = records["nodes"].str[1].where(pairs, None)
    parsed = records["test"].str.extract(r"::test_(\w+?)(?:\[(\D*)\d*\])?$")
    collective = records["suite"] == "collective"
    records["op"] = parsed[0].where(collective, None)
    records["scope"] = parsed[1].where(collective, None)
    failed = records[records["verdict"] == "fail"]
    findings = [{"severity": "fail", "scope": "link" if isinstance(r.dst, str) else "node", "node": r.src,
                 "rail": None if pd.isna(r.rail) else int(r.rail), "peer": r.dst, "metric": r.metric,
                 "value": r.value, "expected": r.threshold, "evidence": [r.test],
                 "message": f"{r.test}: {r.metric} {r.value} {r.unit} against {r.threshold}"}
                for r in failed.head(20).itertuples()]
    return Analysis(run=run, profile=profile, records=records, findings=findings, drains=[]), "fallback"


@pytest.fixture(scope="module")
def real_run(default_run):
    """The embedded default's run folder (tests/conftest.py's default_run, shared with test_default_run.py)."""
    import re
    return Path(re.search(r"^run folder: (\S+)$", default_run.stdout, re.M).group(1))


def test_report_in_headless_chromium(real_run, tmp_path):
    from acceptance.report import render

    analysis, how = analysis_of(real_run)
    html = render(analysis, real_run)
    assert html == real_run / "report.html" and html.exists()
    screenshot = real_run / "report.png"
    page = load_page(html, _profile_dir(tmp_path), screenshot)

    assert page["errors"] == [], page["errors"]
    foreign = [u for u in page["requests"] if u != page["url"] and not u.startswith("data:")]
    assert foreign == [], f"the report fetched something other than itself and data: URIs: {foreign}"
    assert page["url"] in page["requests"]

    facts = page["facts"]
    verdict = analysis.verdict.upper()
    assert facts["bannerVisible"] and verdict in facts["banner"], facts["banner"]
    assert facts["title"].startswith(verdict)
    assert facts["findings"] and "Findings" in facts["findings"]
    assert facts["heatmaps"] >= 1 and facts["heatmapsDecoded"] == facts["heatmaps"], facts
    assert all(i["w"] > 0 and i["src"].startswith("data:image/png;base64") for i in facts["images"]), facts["images"]
    assert facts["scripts"] == 0
    assert screenshot.exists() and screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"report {html} ({how}); screenshot {screenshot}")


def test_report_of_a_large_fleet_in_headless_chromium(tmp_path):
    """Above 64 nodes the heatmaps are node strips (a rails x nodes image per metric), not a matrix per rail;
    the slow NIC heads the worst-NIC table. 80 nodes x 2 rails, all pairs at one size (a few seconds)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from synthetic import make_run_fast

    from acceptance.analysis import analyze
    from acceptance.report import render

    run = make_run_fast(tmp_path / "run", nodes=80, rails=2, slow_nic=("node07", 1, 0.3))
    html = render(analyze(run), run)
    page = load_page(html, _profile_dir(tmp_path), run / "report.png")
    assert page["errors"] == [], page["errors"]
    facts = page["facts"]
    assert facts["heatmaps"] == 1 and facts["heatmapsDecoded"] == 1, facts  # one strip: one metric, both rails
    assert "node07" in facts["findings"] and "Nodes to drain (1)" in facts["findings"], facts["findings"]
    text = html.read_text(encoding="utf-8")
    worst = text[text.index("<h3>write bandwidth at 8MiB</h3>"):]
    assert worst.index("<td>node07</td>") < worst.index("</table>"), "the slow NIC heads the worst-NIC table"


def _profile_dir(tmp_path: Path) -> Path:
    path = tmp_path / "chromium-profile"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_browser_harness_sees_network_and_errors(tmp_path):
    """The checks above can fail: a page with a remote image and a console error is caught."""
    page_file = tmp_path / "bad.html"
    page_file.write_text("<!DOCTYPE html><html><head><link rel='icon' href='data:,'></head><body>"
                         "<img src='http://127.0.0.1:9/x.png'>"
                         "<script>console.error('boom')</script></body></html>")
    page = load_page(page_file, _profile_dir(tmp_path), tmp_path / "bad.png")
    assert any("boom" in e for e in page["errors"]), page["errors"]
    assert "http://127.0.0.1:9/x.png" in page["requests"], page["requests"]


if __name__ == "__main__":  # python tests/integration/test_report_browser.py REPORT.html [SHOT.png]
    target = Path(sys.argv[1])
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "report-browser-profile"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    result = load_page(target, tmp, Path(sys.argv[2]) if len(sys.argv) > 2 else target.with_suffix(".png"))
    print(json.dumps({k: v for k, v in result.items() if k != "facts"} | {"facts": {
        k: v for k, v in result["facts"].items() if k != "images"}}, indent=1)[:4000])
