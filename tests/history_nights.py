"""A small history store of synthetic nights for the report and Prometheus tests: 4 nodes x 2 rails,
one night a day from 2026-01-01, checked one after the other as the nightly job does
(`acceptance history check`, the first night pinned).

    night-0  clean, pinned
    night-1  node04's NIC on rail 0 at 60% (a bound finding)
    night-2  clean
    night-3  node04's NIC on rail 0 at 60% again; the link node01 <-> node03 on rail 1 at 93%
    night-4  node04:rail0 passes (intermittent: it failed on 2 of the last 5 nights); the link at 89%
             of its history (it drifted: a fail, beyond twice the 5% tolerance), above its 320 Gbit/s bound
    night-5  clean, ingested only (no history check): later than night-4, so night-4's trend ends before it
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from acceptance.cli import main
from synthetic import make_run

NIGHTLY = str(Path(__file__).resolve().parent / "profiles" / "nightly.toml")
DRIFTING = "node01:rail1:node03"
FLAPPING = "node04:rail0"
LINK_FACTOR = {3: 0.93, 4: 0.89}
NIC_NIGHTS = (1, 3)


@dataclass
class Nights:
    store: Path
    runs: list[Path]          # night-0 .. night-5

    @property
    def tonight(self) -> Path:
        return self.runs[4]


def night(root: Path, n: int) -> Path:
    d = make_run(root / f"night-{n}", nodes=4, rails=2, seed=n, run_id=f"night-{n}", profile=NIGHTLY,
                 collectives=False, memreg=False, latency=False,
                 slow_link=("node01", "node03", 1, LINK_FACTOR[n]) if n in LINK_FACTOR else None,
                 slow_nic=("node04", 0, 0.6) if n in NIC_NIGHTS else None)
    run = json.loads((d / "run.json").read_text())
    run["start"], run["end"] = f"2026-01-{n + 1:02d}T02:00:00Z", f"2026-01-{n + 1:02d}T03:00:00Z"
    (d / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    return d


def make_nights(root: Path) -> Nights:
    """The store at root/store and the six run folders (night-0 .. night-4 checked, night-5 only ingested)."""
    store = root / "store"
    runs = []
    for n in range(6):
        d = night(root, n)
        if n == 5:
            assert main(["history", "ingest", str(d), "--history", str(store)]) == 0
        else:
            code = main(["history", "check", str(d), "--history", str(store)])
            assert code == (1 if n in NIC_NIGHTS or n == 4 else 0), (n, code)
        if n == 0:
            assert main(["history", "pin", str(d), "--history", str(store)]) == 0
        runs.append(d)
    return Nights(store, runs)
