"""The run folder and its measurement records.

reports/<run-id>/
  run.json        what ran, where, with which thresholds, and whether it completed
  results.jsonl   one record per line, appended and flushed as each test ends
  junit.xml       rank 0 only
  logs/rank-<r>.log
  logs/records-rank-<r>.jsonl   rank r's records of the test in progress, as it makes them (Recorder);
                                kept in results.jsonl if the job ends inside that test (RunFolder.salvage)
  logs/staged.jsonl             rank 0: the records of the test ending, each rank's as it arrives, appended
                                to results.jsonl once every rank has (stage_lines, land_staged)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import numbers
import os
import secrets
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

REQUIRED_KEYS = ("test", "suite", "metric", "value", "unit", "size", "rail", "nodes", "ranks",
                 "engine", "memory", "iteration", "time", "samples", "threshold", "verdict")
# ops / ops_failed / ops_missing: a data check's verified operations, how many of them did not deliver
# exactly, and how many of those left their destination's poison untouched (never arrived).
# op / scope: what a record measured and over which communicator (a collective: allreduce, alltoall over
# world, rail or node; a pairwise one: write, read, atomic, pingpong); device / port: the RDMA device
# and port a node-local record is about (port counters, port facts); saturated: a port counter at its
# cap, "during" or "before" the window. Analysis reads these fields, never the test id or the detail.
# start: when the measurement a record summarizes began (UTC ISO, as `time`, which is when it ended),
# so a run shows which measurements ran at the same time (every rail at once).
# phase: a pairwise suite's "screen" (the scheduled rounds), "confirm" (a suspect measured again, alone,
# and against partners that screened clean), "reference" (pairs that screened clean, measured in the
# confirmation's rounds: what the suspects are compared with), "full" and "alone" (the load check of a
# node slow on most rails: every rail at once, then one rail at a time; analysis.fullload); absent
# without rdma_write.confirm.
# file: a test_failed record's test file (its module's node id), which a record made for the whole
# file (port counters, whose test is the file) explains.
# round: a pairwise suite's scheduled round (its index in the rail's schedule): a relaunch after a lost
# node keeps the rounds that ended and measures the rest again (acceptance.cli.attempts).
OPTIONAL_KEYS = ("bound", "detail", "ops", "ops_failed", "ops_missing", "op", "scope", "device", "port",
                 "saturated", "start", "phase", "file", "round")
PHASES = ("screen", "confirm", "reference", "full", "alone")
# The run folder's schema (run.json "schema"). 1 (run.json without "schema"): records had no op / scope /
# device / port / saturated fields; acceptance.analysis.load derives them as version 1 did, from the
# test id and the detail, for such folders only. 3: retransmission counters judged per million packets
# (their `<name>_ppm` records), GPUDirect RDMA as gdrdma / gdrdma_sends / gdrdma_support judged by the
# catalog; load reads a schema 2 folder by schema 2's rules. A folder of a newer schema is refused.
SCHEMA_VERSION = 3
SCOPES = ("world", "rail", "node")
SATURATED = ("during", "before")
# How a record's threshold was derived: a number in the profile ("absolute"), the line-rate floor
# ("line_rate"), the bound the test itself set ("recorded", schema 2 and before), or the run's own population of comparable
# measurements ("fleet": applied by the analysis, which needs the whole run; while a test records,
# only the absolute floor is known). "fleet_too_few": a fleet bound applies, but the population was too
# small to derive it: the record warns, never passes (acceptance.rules.judge).
BOUND_ORIGINS = ("absolute", "line_rate", "recorded", "fleet", "fleet_too_few")
# A record's verdict, and how bad each is (worst() of several).
VERDICTS = ("pass", "fail", "warn", "info")
_SEVERITY = {"info": 0, "pass": 1, "warn": 2, "fail": 3}
# The metric of the record the plugin writes for a test that failed (on any rank, in any phase).
FAILED_METRIC = "test_failed"


def worst(verdicts: Iterable[str]) -> str:
    """The worst of record verdicts: fail > warn > pass > info ("info" for none)."""
    return max(verdicts, key=_SEVERITY.__getitem__, default="info")
# Burn-in: `acceptance run --iterations/--duration` launches the suites once per
# iteration with this set; every record carries it.
ENV_ITERATION = "ACCEPTANCE_ITERATION"
MEMORY = ("host", "cuda")


class RecordError(ValueError):
    pass


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class InputError(ValueError):
    """A file given to the harness (a run folder's run.json or results.jsonl, a snapshot) that cannot
    be used: the message names the file, the line where it helps, and why. Exit code 2."""


def read_json(path: str | os.PathLike, label: str | None = None) -> Any:
    """A JSON file's content; ValueError "<label>: no such file | cannot read: ... | not JSON (...)"
    (label: the path by default)."""
    label = str(path) if label is None else label
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{label}: no such file") from None
    except OSError as e:
        raise ValueError(f"{label}: cannot read: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{label}: not JSON ({e})") from None


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def make_record(*, test: str, suite: str, metric: str, value: float | int | None, unit: str,
                nodes: list[str], ranks: list[int], size: int | None = None,
                rail: int | None = None, engine: str | None = None, memory: str = "host",
                iteration: int = 0, samples: int = 1, threshold: float | None = None,
                verdict: str = "info", bound: str | None = None, detail: str | None = None,
                ops: int | None = None, ops_failed: int | None = None,
                ops_missing: int | None = None, op: str | None = None, scope: str | None = None,
                device: str | None = None, port: int | None = None,
                saturated: str | None = None, start: str | None = None,
                phase: str | None = None, file: str | None = None, round: int | None = None) -> dict[str, Any]:
    """One results.jsonl line, checked so a bad record fails the test that made it."""
    if verdict not in VERDICTS:
        raise RecordError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if bound is not None and bound not in BOUND_ORIGINS:
        raise RecordError(f"bound must be one of {BOUND_ORIGINS} or None, got {bound!r}")
    if scope is not None and scope not in SCOPES:
        raise RecordError(f"scope must be one of {SCOPES} or None, got {scope!r}")
    if saturated is not None and saturated not in SATURATED:
        raise RecordError(f"saturated must be one of {SATURATED} or None, got {saturated!r}")
    if memory not in MEMORY:
        raise RecordError(f"memory must be one of {MEMORY}, got {memory!r}")
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"value of {metric!r} must be a number or None, got {value!r}")
        if not math.isfinite(value):
            raise RecordError(f"value of {metric!r} must be finite, got {value!r} (use None and a detail)")
    rec = {
        "test": test, "suite": suite, "metric": metric,
        "value": float(value) if isinstance(value, float) else value, "unit": unit,
        "size": size, "rail": rail, "nodes": list(nodes), "ranks": [int(r) for r in ranks],
        "engine": engine, "memory": memory, "iteration": iteration, "time": utc_now(),
        "samples": samples, "threshold": threshold, "verdict": verdict,
    }
    if bound is not None:
        rec["bound"] = bound
    if detail is not None:
        rec["detail"] = detail
    for key, count in (("ops", ops), ("ops_failed", ops_failed), ("ops_missing", ops_missing)):
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0:
                raise RecordError(f"{key} of {metric!r} must be a count >= 0, got {count!r}")
            rec[key] = int(count)
    for key, text in (("op", op), ("scope", scope), ("device", device)):
        if text is not None:
            rec[key] = str(text)
    if port is not None:
        if isinstance(port, bool) or not isinstance(port, numbers.Integral) or port < 0:
            raise RecordError(f"port of {metric!r} must be a port number >= 0, got {port!r}")
        rec["port"] = int(port)
    if saturated is not None:
        rec["saturated"] = saturated
    if phase is not None:
        if phase not in PHASES:
            raise RecordError(f"phase must be one of {PHASES} or None, got {phase!r}")
        rec["phase"] = phase
    if file is not None:
        rec["file"] = str(file)
    if start is not None:  # analysis.load reads every field before it and skips this one and round
        rec["start"] = str(start)
    if round is not None:
        if isinstance(round, bool) or not isinstance(round, numbers.Integral) or round < 0:
            raise RecordError(f"round of {metric!r} must be a round index >= 0, got {round!r}")
        rec["round"] = int(round)
    return rec


class Recorder:
    """Collects one rank's records for the test in progress; the plugin gathers them to rank 0 when the
    test ends. With `spill` (RunFolder.spill), each record is also appended to that file as it is made,
    and the file emptied once the test's records are in results.jsonl (landed): a rank lost or hung in
    the middle of a test leaves there what the test had measured, every completed round's records,
    which RunFolder.salvage keeps."""

    def __init__(self, rank: int, node: str, rail: int | None, iteration: int = 0, spill: Path | None = None):
        self.rank, self.node, self.rail, self.iteration = rank, node, rail, iteration
        self._pending: list[dict] = []
        self._spill = None
        if spill is not None:
            try:
                self._spill = open(spill, "a", buffering=1)  # line-buffered: a killed rank's lines are written
            except OSError:
                pass  # the records still reach results.jsonl as each test ends; only a lost test's are not kept

    def bind(self, test: str, suite: str):
        """The `record(metric, value, unit, **fields)` callable handed to a test."""
        def record(metric: str, value, unit: str, **fields) -> dict:
            fields.setdefault("nodes", [self.node])
            fields.setdefault("ranks", [self.rank])
            fields.setdefault("rail", self.rail)
            fields.setdefault("iteration", self.iteration)
            rec = make_record(test=test, suite=fields.pop("suite", suite), metric=metric,
                              value=value, unit=unit, **fields)
            self._pending.append(rec)
            if self._spill is not None:
                self._spill.write(json.dumps(rec) + "\n")
            return rec
        return record

    def landed(self) -> None:
        """The records taken are in results.jsonl: the spill file starts empty for the next test."""
        if self._spill is not None:
            self._spill.seek(0)
            self._spill.truncate()

    def close(self) -> None:
        """The session's end: an empty spill file is removed; one that holds records (a test that never
        landed) stays for RunFolder.salvage."""
        if self._spill is not None:
            self._spill.close()
            path = Path(self._spill.name)
            if path.exists() and path.stat().st_size == 0:
                path.unlink(missing_ok=True)
            self._spill = None

    def take(self) -> list[dict]:
        out, self._pending = self._pending, []
        return out

    def take_lines(self) -> str:
        """The pending records as results.jsonl lines, encoded here: rank 0 then only writes every
        rank's text (decoding and re-encoding 8,192 ranks' records cost it seconds a test)."""
        return "".join(json.dumps(r) + "\n" for r in self.take())


class RunFolder:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._stage = None  # logs/staged.jsonl, open while a test's records arrive (stage_lines)

    @classmethod
    def create(cls, parent: str | os.PathLike, run_id: str | None = None) -> "RunFolder":
        folder = cls(Path(parent) / (run_id or new_run_id()))
        folder.ensure()
        return folder

    def ensure(self) -> None:
        (self.path / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def results(self) -> Path:
        return self.path / "results.jsonl"

    @property
    def junit(self) -> Path:
        return self.path / "junit.xml"

    def log(self, rank: int) -> Path:
        return self.path / "logs" / f"rank-{rank}.log"

    def read_run(self) -> dict:
        return json.loads(self.run_json.read_text())

    def write_run(self, data: dict) -> None:
        """Atomic, so a reader (or a crash) never sees half a run.json; each writer has its own
        temporary file, so two writers never mix theirs."""
        fd, tmp = tempfile.mkstemp(prefix=".run.json.", dir=self.path)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(data, indent=2, sort_keys=False) + "\n")
            os.replace(tmp, self.run_json)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def update_run(self, **changes) -> dict:
        """Read, change and write run.json under a lock: the CLI, rank 0's threads and a rank
        that found rank 0 gone may all write it."""
        lock = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)  # the folder itself: no lock file left
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self.read_run() if self.run_json.exists() else {}
            data.update(changes)
            self.write_run(data)
        finally:
            os.close(lock)
        return data

    @property
    def landed_file(self) -> Path:
        """One line per test whose records rank 0 wrote to results.jsonl: {"test", "iteration"}."""
        return self.path / "logs" / "landed.jsonl"

    def mark_landed(self, test: str, iteration: int) -> None:
        with open(self.landed_file, "a") as f:
            f.write(json.dumps({"test": test, "iteration": iteration}) + "\n")

    def landed(self, iteration: int) -> set[str]:
        """The tests of `iteration` whose records landed (a relaunch leaves them out), without reading
        results.jsonl, which at scale holds tens of millions of lines."""
        if not self.landed_file.exists():
            return set()
        out = set()
        for line in self.landed_file.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line cut short when its launch was lost
            if isinstance(entry, dict) and entry.get("iteration") == iteration:
                out.add(entry.get("test"))
        return out - {None}

    def spill(self, rank: int) -> Path:
        """A rank's records of the test in progress, as it makes them (Recorder)."""
        return self.path / "logs" / f"records-rank-{rank}.jsonl"

    def salvage(self, cut: Callable[[list[dict]], set[int]] | None = None) -> tuple[int, int]:
        """After the launcher is done: the records the ranks' spill files still hold (a test in flight
        when a rank was lost, the run hung or was stopped) appended to results.jsonl, then the files
        removed; (records kept, ranks they came from). A line cut short by the kill is
        dropped, and so is a test whose records landed already (its ranks were stopped just after it ended).

        cut(records) names (by position) records to set aside rather than keep, because a relaunch
        measures them again (a round that had not ended): they go to logs/superseded.jsonl, never lost."""
        files = sorted((self.path / "logs").glob("records-rank-*.jsonl"))
        found: list[tuple[tuple, str, int, dict]] = []  # ((test, iteration), line, which file, record)
        for i, f in enumerate(files):
            for line in f.read_text(errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # the last line of a rank killed while writing it
                found.append(((rec.get("test"), rec.get("iteration")), line + "\n", i, rec))
        if found:
            landed = self._landed_tests({entry[0] for entry in found})
            found = [entry for entry in found if entry[0] not in landed]
            aside = cut([entry[3] for entry in found]) if cut is not None else set()
            if aside:
                with open(self.path / "logs" / "superseded.jsonl", "a") as f:
                    f.writelines(found[j][1] for j in sorted(aside))
                found = [entry for j, entry in enumerate(found) if j not in aside]
            self.append_lines(line for _, line, _, _ in found)
        for f in files:
            f.unlink(missing_ok=True)
        return len(found), len({i for _, _, i, _ in found})

    def _landed_tests(self, tests: set) -> set:
        """Which of `tests` ((test, iteration)) have their records in results.jsonl already: a test_failed
        record does not count, since rank 0 writes one as soon as a phase fails, before the test's records."""
        if not self.results.exists():
            return set()
        out = set()
        with open(self.results, errors="replace") as f:
            for line in f:
                if any(f'"test": {json.dumps(t)}' in line for t, _ in tests):
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("metric") != FAILED_METRIC:
                        out.add((rec.get("test"), rec.get("iteration")))
        return out & tests

    def append_records(self, records: Iterable[dict]) -> int:
        lines = [json.dumps(r, sort_keys=False) + "\n" for r in records]
        self.append_lines(lines)
        return len(lines)

    @property
    def staged(self) -> Path:
        return self.path / "logs" / "staged.jsonl"

    def stage_lines(self, texts: Iterable[str]) -> str:
        """Rank 0: records of the test ending (results.jsonl text), set aside as each rank's arrive, so
        that rank 0 holds one rank's at a time (screening every pair of 1,024 x 8 sends it ~1 MB a rank,
        8 GB in all); land_staged appends them to results.jsonl once every rank has sent its own.
        Returns "": what is left of the text in memory."""
        texts = [t for t in texts if t]
        if texts:
            if self._stage is None:  # one open for the whole sync point, not one per rank
                self._stage = open(self.staged, "a")
            self._stage.writelines(texts)
        return ""

    def drop_staged(self) -> None:
        """What a sync point that never completed staged (a rank was lost: the spill files keep it)."""
        if self._stage is not None:
            self._stage.close()
            self._stage = None
        self.staged.unlink(missing_ok=True)

    def land_staged(self, texts: Iterable[str] = ()) -> int:
        """Append what stage_lines set aside, then `texts`, to results.jsonl, synced to disk; the bytes appended."""
        self.stage_lines(texts)
        if self._stage is not None:
            self._stage.close()
            self._stage = None
        try:
            src = open(self.staged, "rb")
        except FileNotFoundError:
            return 0
        with src, open(self.results, "ab") as out:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
            moved = src.tell()
        self.drop_staged()
        return moved

    def append_lines(self, texts: Iterable[str]) -> int:
        """Append results.jsonl text (whole lines, as Recorder.take_lines encodes them), synced to disk;
        the characters written."""
        texts = [t for t in texts if t]
        if not texts:
            return 0
        with open(self.results, "a") as f:
            f.writelines(texts)
            f.flush()
            os.fsync(f.fileno())
        return sum(len(t) for t in texts)
