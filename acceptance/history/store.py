"""The history store: a folder holding history.db (SQLite: nights, components, per-NIC / per-node /
per-rail summaries, findings) and, per night and metric, one value per link as a NumPy column
(nights/<night>.<metric>.npy) beside the links' keys (keys/<digest>.npy, shared by the nights that
measured the same links). docs/history.md says why.

A link's key is its two NICs' component ids (lower << 32 | higher): the NIC ids carry the physical
identity, so a replaced NIC gives its links new keys, and their series start again.

Ingesting is idempotent (a run id is kept once) and safe beside another ingest: the ids are
allocated, the columns written and the night inserted inside one IMMEDIATE transaction, which a
second writer waits for. On a local disk the database is in WAL mode; on a network filesystem
(NFS, Lustre, ...) in the rollback journal's (DELETE) mode, every write also holding an fcntl lock
on history.lock, and a mount whose locks stay on each node is refused (storage.py says how and why).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from ..records.results import InputError
from .components import Name, finding_name, nic_identity, node_serial, parse_name, subject
from .night import Night, read_night
from .storage import LOCK_NAME, LockError, Placement, WriteLock, placement

ENV_HISTORY = "ACCEPTANCE_HISTORY"
DB_NAME = "history.db"
STORE_VERSION = 2  # 2: findings carry their component's node, rail and peer as fields
BUSY_TIMEOUT_S = 600  # another job's ingest holds the write lock for seconds, never minutes
HISTORY_KINDS = ("drift", "intermittent", "recovered", "trend")

_TABLES = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE nights(id INTEGER PRIMARY KEY, run_id TEXT UNIQUE NOT NULL, started TEXT NOT NULL, path TEXT,
    verdict TEXT NOT NULL, complete INTEGER NOT NULL, exit_code INTEGER, accepted INTEGER NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0, keys TEXT, metrics TEXT NOT NULL DEFAULT '{}', ingested TEXT NOT NULL,
    source TEXT NOT NULL DEFAULT 'run', note TEXT NOT NULL DEFAULT '');
CREATE INDEX nights_started ON nights(started);
CREATE TABLE components(id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL, node TEXT, rail INTEGER,
    device TEXT, guid TEXT, port INTEGER, serial TEXT, first_night INTEGER, replaced_by INTEGER);
CREATE INDEX components_name ON components(name);
CREATE TABLE summary(night INTEGER NOT NULL, component INTEGER NOT NULL, metric TEXT NOT NULL, value REAL,
    PRIMARY KEY(night, component, metric)) WITHOUT ROWID;
CREATE TABLE fleet(night INTEGER NOT NULL, rail INTEGER NOT NULL, metric TEXT NOT NULL, value REAL, links INTEGER,
    PRIMARY KEY(night, rail, metric)) WITHOUT ROWID;
CREATE TABLE findings(night INTEGER NOT NULL, subject TEXT NOT NULL, severity TEXT, kind TEXT, scope TEXT,
    metric TEXT, message TEXT, node TEXT, rail INTEGER, peer TEXT);
CREATE INDEX findings_subject ON findings(subject, night);
CREATE INDEX findings_night ON findings(night);
"""


class StoreError(InputError):
    """The store cannot be used as asked; str() names the path and why (exit 2)."""


def default_path(run_dir=None) -> Path:
    """$ACCEPTANCE_HISTORY, else history/ beside the run folder (its parent), else reports/history."""
    env = os.environ.get(ENV_HISTORY)
    if env:
        return Path(env)
    if run_dir is not None:
        return Path(run_dir).resolve().parent / "history"
    return Path("reports") / "history"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def file_stem(run_id: str) -> str:
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:80]
    return f"{clean}-{hashlib.sha1(run_id.encode()).hexdigest()[:8]}"


@dataclass
class Ingested:
    run_id: str
    night: int
    verdict: str
    links: int
    new: bool                  # False: the run was in the store already (counted once)
    replaced: list[str]        # components whose part changed (a new GUID or serial)


class Store:
    """One history folder. Open with Store.open(path); every method reads or writes it directly."""

    def __init__(self, path: Path, db: sqlite3.Connection, storage: Placement | None = None):
        self.path = path
        self.db = db
        # How the store is kept safe where it is (storage.placement): the journal mode, and whether
        # every write holds history.lock (a network filesystem).
        self.storage = storage or Placement(None, "wal", False, "not told")
        self._lock = WriteLock(path / LOCK_NAME, self.storage.mount, BUSY_TIMEOUT_S) if self.storage.shared else None
        self._keys_cache: dict[str, np.ndarray] = {}

    # ---- opening, versions ---------------------------------------------------------------
    @classmethod
    def open(cls, path, create: bool = True) -> Store:
        path = Path(path)
        if path.exists() and not path.is_dir():
            raise StoreError(f"{path}: the history store is a folder, and this is a file")
        db_file = path / DB_NAME
        if not db_file.exists() and not create:
            raise StoreError(f"{path}: no history store here (no {DB_NAME}; `acceptance history ingest` makes one)")
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / "nights").mkdir(exist_ok=True)
            (path / "keys").mkdir(exist_ok=True)
        except OSError as e:
            raise StoreError(f"{path}: cannot open the history store: {e}") from None
        where = placement(path)  # after mkdir: an automounted folder is mounted by now
        if where.refusal:
            raise StoreError(where.refusal)
        try:
            db = sqlite3.connect(db_file, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"{path}: cannot open the history store: {e}") from None
        store = cls(path, db, where)
        try:
            with store._hold():  # network: the journal mode changes and the schema is made under the lock
                store._journal()
                store._ensure_schema()
        except sqlite3.OperationalError as e:
            db.close()
            if "locked" in str(e) or "busy" in str(e):
                raise StoreError(f"{db_file}: another process holds the store ({e}); run this again when it is "
                                 "done") from None
            raise StoreError(f"{db_file}: not an acceptance history store ({e})") from None
        except sqlite3.DatabaseError as e:  # a history.db that is not SQLite, or not ours
            db.close()
            raise StoreError(f"{db_file}: not an acceptance history store ({e})") from None
        except StoreError:
            db.close()
            raise
        store._import_runs_tsv()
        return store

    def _journal(self) -> None:
        """WAL on a local disk; the rollback journal (DELETE) on a network filesystem, where WAL's
        shared-memory index cannot be shared between nodes (a WAL store is turned back here, under the
        lock, by its first open over the network). The mode is checked, not assumed."""
        want = self.storage.journal_mode
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                got = str(self.db.execute(f"PRAGMA journal_mode={want.upper()}").fetchone()[0]).lower()
                break
            except sqlite3.OperationalError as e:
                # Leaving WAL needs the database to itself, and SQLite does not wait for that: it is
                # open elsewhere in WAL mode (an older acceptance; a process on the host serving this
                # folder from its own disk, before any node used it over the network).
                if "locked" not in str(e) or not self.storage.shared:
                    raise
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"{self.path / DB_NAME}: in WAL mode, which does not work over a network filesystem, and "
                        f"another process has kept it open for {BUSY_TIMEOUT_S} s, so it cannot be turned to the "
                        f"rollback journal ({self.storage.why}). Stop the acceptance processes using this store "
                        f"(an older acceptance; one on the host that serves this folder) and run this again"
                    ) from None
                time.sleep(0.5)
        if got != want and self.storage.shared:
            raise StoreError(f"{self.path / DB_NAME}: SQLite kept journal_mode={got} where this store needs {want} "
                             f"({self.storage.why}); is a process of an older acceptance still using it?")

    def journal_mode(self) -> str:
        """The journal mode in effect (PRAGMA journal_mode): "wal" or "delete"."""
        return str(self.db.execute("PRAGMA journal_mode").fetchone()[0]).lower()

    def close(self) -> None:
        self.db.close()

    def _ensure_schema(self) -> None:
        with self.write():
            have = self.db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
            if not have:
                for statement in filter(str.strip, _TABLES.split(";")):
                    self.db.execute(statement)
                self.db.execute("INSERT INTO meta VALUES ('version', ?)", (str(STORE_VERSION),))
                return
            row = self.db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        version = int(row[0]) if row and str(row[0]).isdigit() else None
        if version is None:
            raise StoreError(f"{self.path / DB_NAME}: not an acceptance history store (no version)")
        if version > STORE_VERSION:
            raise StoreError(f"{self.path / DB_NAME}: written by a newer acceptance (store version {version}; "
                             f"this one reads up to {STORE_VERSION}): upgrade acceptance, or use another --history")
        if version < 2:
            self._migrate_to_2()

    def _migrate_to_2(self) -> None:
        """Version 1 kept a finding's component only as its subject string: give every row the fields
        (node, rail, peer), read once here from the subject as subject() wrote it."""
        with self.write():
            for column in ("node TEXT", "rail INTEGER", "peer TEXT"):
                self.db.execute(f"ALTER TABLE findings ADD COLUMN {column}")
            for (text,) in self.db.execute("SELECT DISTINCT subject FROM findings").fetchall():
                try:
                    name = parse_name(text)
                except ValueError:
                    continue  # a switch or uplink: no component series of its own
                self.db.execute("UPDATE findings SET node=?, rail=?, peer=? WHERE subject=?",
                                (name.node, name.rail, name.peer, text))
            self.db.execute("UPDATE meta SET value=? WHERE key='version'", (str(STORE_VERSION),))

    def _import_runs_tsv(self) -> None:
        """The nightly job's older history (runs.tsv: time, run folder, exit code) comes in once."""
        tsv = self.path / "runs.tsv"
        if not tsv.is_file() or self.meta("runs_tsv_imported"):
            return
        try:
            text = tsv.read_text()
        except FileNotFoundError:
            return  # another job opening the store at once has imported it
        for n, line in enumerate(text.splitlines(), 1):
            parts = line.split("\t")
            if len(parts) < 3 or not parts[1]:
                continue
            when, run_dir, code = parts[0], Path(parts[1]), parts[2]
            try:
                self.ingest(run_dir, source="runs.tsv")
                continue
            except InputError:
                pass  # the folder is gone or broken: keep what runs.tsv knew, never as a healthy night
            with self.write():
                exists = self.db.execute("SELECT 1 FROM nights WHERE run_id=?", (run_dir.name,)).fetchone()
                if not exists:
                    self.db.execute(
                        "INSERT INTO nights(run_id, started, path, verdict, complete, exit_code, accepted, ingested,"
                        " source, note) VALUES (?,?,?,?,?,?,0,?,'runs.tsv',?)",
                        (run_dir.name, when, str(run_dir), "fail" if code == "1" else "incomplete" if code != "0"
                         else "pass", int(code in ("0", "1")), int(code) if code.isdigit() else None, _now(),
                         f"runs.tsv line {n}: run folder not readable; no values"))
        with self.write():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('runs_tsv_imported', ?)", (_now(),))
        try:
            tsv.rename(tsv.with_name("runs.tsv.imported"))
        except FileNotFoundError:
            pass  # the other job renamed it first (each run id was kept once)

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return row[0] if row else None

    @contextmanager
    def write(self):
        """One IMMEDIATE transaction: a second writer waits (busy timeout) rather than interleaving. On a
        network filesystem it runs holding history.lock (StoreError when that cannot be had)."""
        with self._hold():
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    @contextmanager
    def _hold(self):
        """history.lock, exclusively, where the store is shared over the network (re-entrant); else nothing."""
        if self._lock is None:
            yield
            return
        try:
            self._lock.__enter__()
        except LockError as e:
            raise StoreError(str(e)) from None
        try:
            yield
        finally:
            self._lock.__exit__(None, None, None)

    # ---- ingest ------------------------------------------------------------------------
    def ingest(self, run_dir, source: str = "run") -> Ingested:
        """Keep one run folder (InputError naming the file when it cannot be read)."""
        run_dir = Path(run_dir)
        known = self._night_of_run(run_dir)
        if known is not None:
            return Ingested(known["run_id"], known["id"], known["verdict"], 0, False, [])
        night = read_night(run_dir)
        return self.add(night, source)

    def _night_of_run(self, run_dir: Path) -> dict | None:
        try:
            run_id = json.loads((run_dir / "run.json").read_text()).get("run_id")
        except (OSError, ValueError, AttributeError):
            return None
        return self.night(run_id) if run_id else None

    def add(self, night: Night, source: str = "run") -> Ingested:
        with self.write():
            row = self.db.execute("SELECT id, verdict FROM nights WHERE run_id=?", (night.run_id,)).fetchone()
            if row:
                return Ingested(night.run_id, row[0], row[1], 0, False, [])
            cur = self.db.execute(
                "INSERT INTO nights(run_id, started, path, verdict, complete, exit_code, accepted, ingested, source,"
                " note) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (night.run_id, night.started, night.path, night.verdict, int(night.complete), night.exit_code,
                 int(night.verdict == "pass"), _now(), source, night.note))
            nid = cur.lastrowid
            replaced: list[str] = []
            nodes = {n: self._component("node", n, None, {"serial": node_serial(night.identity, n)}, nid, replaced)
                     for n in night.names}
            nics: dict[tuple[int, int], int] = {}
            for r in night.rails:
                for i, n in enumerate(night.names):
                    nics[(i, r)] = self._component("nic", n, r, nic_identity(night.identity, n, r), nid, replaced)
            keys_digest, links, stored = self._write_links(night, nics, nid)
            self.db.execute("UPDATE nights SET keys=?, metrics=? WHERE id=?", (keys_digest, json.dumps(stored), nid))
            self._summaries(night, nid, nodes, nics)
            self.db.executemany(_INSERT_FINDING, [_finding_row(nid, f) for f in night.findings])
        return Ingested(night.run_id, nid, night.verdict, links, True, replaced)

    def _component(self, kind: str, node: str, rail, ident: dict, night: int, replaced: list[str]) -> int:
        name = subject(kind, node, rail)
        row = self.db.execute("SELECT id, guid, serial, device, port FROM components WHERE name=? AND kind=? "
                              "AND replaced_by IS NULL", (name, kind)).fetchone()
        guid, serial = ident.get("guid"), ident.get("serial")
        if row:
            cid, old_guid, old_serial, old_device, old_port = row
            changed = (guid and old_guid and guid != old_guid) or (serial and old_serial and serial != old_serial)
            if not changed:
                if (guid and not old_guid) or (serial and not old_serial) or (ident.get("device") and not old_device):
                    self.db.execute("UPDATE components SET guid=coalesce(guid, ?), serial=coalesce(serial, ?), "
                                    "device=coalesce(device, ?), port=coalesce(port, ?) WHERE id=?",
                                    (guid, serial, ident.get("device"), ident.get("port"), cid))
                return cid
        cur = self.db.execute("INSERT INTO components(kind, name, node, rail, device, guid, port, serial, first_night)"
                              " VALUES (?,?,?,?,?,?,?,?,?)",
                              (kind, name, node, rail, ident.get("device"), guid, ident.get("port"), serial, night))
        if row:
            self.db.execute("UPDATE components SET replaced_by=? WHERE id=?", (cur.lastrowid, row[0]))
            replaced.append(name)
        return cur.lastrowid

    def _write_links(self, night: Night, nics: dict, nid: int) -> tuple[str | None, int, dict]:
        """The night's per-link columns, aligned on one sorted key array; returns (digest, links, metrics)."""
        if not night.links:
            return None, 0, {}
        frames = []
        for metric, f in night.links.items():
            a, b = _nic_ids(nics, f, "u"), _nic_ids(nics, f, "v")
            lo, hi = np.minimum(a, b), np.maximum(a, b)
            frames.append(pd.Series(f["value"].to_numpy(np.float32), index=(lo << 32) | hi, name=metric))
        table = pd.concat(frames, axis=1).sort_index()
        keys = table.index.to_numpy(np.int64)
        digest = hashlib.sha1(keys.tobytes()).hexdigest()[:20]
        keys_file = self.path / "keys" / f"{digest}.npy"
        if not keys_file.exists():
            save_column(keys_file, keys)
        stored = {}
        for metric in table.columns:
            file = self.path / "nights" / f"{file_stem(night.run_id)}.{metric}.npy"
            save_column(file, table[metric].to_numpy(np.float32))
            stored[metric] = {"file": file.name, "unit": night.units.get(metric, ""),
                              "size": _size(night.links[metric])}
        return digest, len(keys), stored

    def _summaries(self, night: Night, nid: int, nodes: dict, nics: dict) -> None:
        """Per NIC the median of its links, per node the median of its NICs, per rail and for the fleet
        the median of those NICs: the series `show` and the fleet trend read. Of the NICs, not the
        links: on a small cluster one NIC is in half its rail's links and would move their median."""
        rows, fleet = [], []
        for metric, f in night.links.items():
            u, v, r, val = (f["u"].to_numpy(), f["v"].to_numpy(), f["rail"].to_numpy(), f["value"].to_numpy())
            ends = pd.DataFrame({"node": np.concatenate([u, v]), "rail": np.concatenate([r, r]),
                                 "value": np.concatenate([val, val])})
            per_nic = ends.groupby(["node", "rail"], sort=False)["value"].median()
            for (i, rail), x in per_nic.items():
                rows.append((nid, nics[(int(i), int(rail))], metric, float(x)))
            per_node = per_nic.groupby(level=0).median()
            for i, x in per_node.items():
                rows.append((nid, nodes[night.names[int(i)]], metric, float(x)))
            links = f.groupby("rail").size()
            for rail, x in per_nic.groupby(level=1).median().items():
                fleet.append((nid, int(rail), metric, float(x), int(links[rail])))
            fleet.append((nid, -1, metric, float(per_nic.median()), len(f)))
        self.db.executemany("INSERT INTO summary VALUES (?,?,?,?)", rows)
        self.db.executemany("INSERT INTO fleet VALUES (?,?,?,?,?)", fleet)

    # ---- nights ------------------------------------------------------------------------
    def nights(self, since: str | None = None) -> pd.DataFrame:
        """Every night, oldest first: id, run_id, started, path, verdict, complete, accepted, pinned, ..."""
        q = "SELECT * FROM nights" + (" WHERE started >= ?" if since else "") + " ORDER BY started, id"
        return pd.read_sql_query(q, self.db, params=(since,) if since else ())

    def night(self, run_id: str) -> dict | None:
        cur = self.db.execute("SELECT * FROM nights WHERE run_id=?", (run_id,))
        row = cur.fetchone()
        return dict(zip([c[0] for c in cur.description], row)) if row else None

    def fleet_series(self, metric: str | None = None) -> pd.DataFrame:
        """Every rail plane's and the fleet's median night by night (the `fleet` table), oldest night
        first: night, run_id, started, verdict, accepted, pinned, rail (-1: the fleet), metric, value, links."""
        q = "SELECT night, rail, metric, value, links FROM fleet" + (" WHERE metric=?" if metric else "")
        vals = pd.read_sql_query(q, self.db, params=(metric,) if metric else ())
        nights = self.nights()[["id", "run_id", "started", "verdict", "accepted", "pinned"]]
        out = nights.rename(columns={"id": "night"}).merge(vals, on="night", how="inner")
        return out.sort_values(["started", "night", "rail", "metric"]).reset_index(drop=True)

    def pin(self, run_id: str) -> None:
        with self.write():
            self.db.execute("UPDATE nights SET pinned=0 WHERE pinned=1")
            self.db.execute("UPDATE nights SET pinned=1 WHERE run_id=?", (run_id,))

    def pinned(self) -> dict | None:
        cur = self.db.execute("SELECT * FROM nights WHERE pinned=1")
        row = cur.fetchone()
        return dict(zip([c[0] for c in cur.description], row)) if row else None

    def set_accepted(self, night: int, accepted: bool) -> None:
        with self.write():
            self.db.execute("UPDATE nights SET accepted=? WHERE id=?", (int(accepted), night))

    def record_findings(self, night: int, findings: list[dict], kinds=HISTORY_KINDS) -> None:
        """Replace the night's findings of `kinds` (a check run twice keeps its last word)."""
        with self.write():
            self.db.execute(f"DELETE FROM findings WHERE night=? AND kind IN ({','.join('?' * len(kinds))})",
                            (night, *kinds))
            self.db.executemany(_INSERT_FINDING, [_finding_row(night, f) for f in findings])

    def findings(self, nights: list[int]) -> pd.DataFrame:
        if not nights:
            return pd.DataFrame(columns=["night", "subject", "severity", "kind", "scope", "metric", "message",
                                         "node", "rail", "peer"])
        marks = ",".join("?" * len(nights))
        return pd.read_sql_query(f"SELECT * FROM findings WHERE night IN ({marks})", self.db, params=nights)

    def prune(self, before: str) -> int:
        """Drop the nights started before `before` (ISO), their rows and columns; never the pinned one."""
        with self.write():
            old = self.db.execute("SELECT id, run_id, metrics FROM nights WHERE started < ? AND pinned=0",
                                  (before,)).fetchall()
            for nid, _run_id, metrics in old:
                for table in ("summary", "fleet", "findings"):
                    self.db.execute(f"DELETE FROM {table} WHERE night=?", (nid,))
                self.db.execute("DELETE FROM nights WHERE id=?", (nid,))
        for _nid, _run_id, metrics in old:
            for m in json.loads(metrics or "{}").values():
                (self.path / "nights" / m["file"]).unlink(missing_ok=True)
        # Inside a write: an ingest writes its keys file before its night is committed, and must not
        # see it taken away as unused.
        with self.write():
            used = {k for (k,) in self.db.execute("SELECT DISTINCT keys FROM nights WHERE keys IS NOT NULL")}
            for f in (self.path / "keys").glob("*.npy"):
                if f.stem not in used:
                    f.unlink(missing_ok=True)
        return len(old)

    # ---- reading columns ------------------------------------------------------------------
    def keys(self, digest: str) -> np.ndarray:
        if digest not in self._keys_cache:
            self._keys_cache[digest] = np.load(self.path / "keys" / f"{digest}.npy", mmap_mode="r")
        return self._keys_cache[digest]

    def column(self, night: dict, metric: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(keys, values) of one night's metric, memory-mapped; None when the night has none."""
        m = json.loads(night.get("metrics") or "{}").get(metric)
        if not m or not night.get("keys"):
            return None
        return self.keys(night["keys"]), np.load(self.path / "nights" / m["file"], mmap_mode="r")

    def aligned(self, keys: np.ndarray, night: dict, metric: str) -> np.ndarray:
        """One night's values of `metric` at `keys` (NaN where that night did not measure the link)."""
        col = self.column(night, metric)
        out = np.full(len(keys), np.nan, dtype=np.float32)
        if col is None:
            return out
        k, v = col
        if len(k) == len(keys) and np.array_equal(k, keys):
            return np.asarray(v, dtype=np.float32)
        at = np.searchsorted(k, keys)
        ok = at < len(k)
        ok[ok] = k[at[ok]] == keys[ok]
        out[ok] = v[at[ok]]
        return out

    def value_at(self, night: dict, metric: str, key: int) -> float:
        """One link's value on one night (NaN where it was not measured): a binary search in the night's
        key array and one 4-byte read of its column. np.load's memory map costs ~1 ms a file, so a
        year's series read through aligned() would spend most of a second opening columns."""
        m = json.loads(night.get("metrics") or "{}").get(metric)
        if not m or not night.get("keys"):
            return float("nan")
        k = self.keys(night["keys"])
        at = int(np.searchsorted(k, key))
        if at >= len(k) or int(k[at]) != key:
            return float("nan")
        with open(self.path / "nights" / m["file"], "rb") as fh:
            fh.seek((at - len(k)) * 4, os.SEEK_END)  # the column ends the file: len(k) float32 (_save)
            return float(np.frombuffer(fh.read(4), dtype=np.float32)[0])

    # ---- components -----------------------------------------------------------------------
    def components(self, name: Name) -> list[dict]:
        """Every physical part that carried a name, oldest first (a replaced NIC: two)."""
        kind = "nic" if name.kind == "link" else name.kind
        names = [subject("nic", name.node, name.rail), subject("nic", name.peer, name.rail)] \
            if name.kind == "link" else [str(name)]
        cur = self.db.execute(f"SELECT * FROM components WHERE kind=? AND name IN ({','.join('?' * len(names))}) "
                              "ORDER BY id", (kind, *names))
        cols = [c[0] for c in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def series(self, name: Name, metric: str | None = None) -> pd.DataFrame:
        """One component's values night by night: night, run_id, started, verdict, accepted, pinned,
        part (the component id: it changes where a part was replaced), metric, value, findings."""
        nights = self.nights()
        if name.kind in ("rail", "fleet"):
            rail = -1 if name.kind == "fleet" else name.rail
            vals = pd.read_sql_query("SELECT night, metric, value FROM fleet WHERE rail=?", self.db, params=(rail,))
            vals["part"] = None
        elif name.kind in ("nic", "node"):
            parts = self.components(name)
            ids = [p["id"] for p in parts]
            vals = pd.read_sql_query(f"SELECT night, component AS part, metric, value FROM summary WHERE component IN "
                                     f"({','.join('?' * len(ids))})", self.db, params=ids) if ids else \
                pd.DataFrame(columns=["night", "part", "metric", "value"])
        else:
            vals = self._link_series(name, nights, metric)
        if metric:
            vals = vals[vals["metric"] == metric]
        out = nights[["id", "run_id", "started", "verdict", "accepted", "pinned"]].rename(columns={"id": "night"}) \
            .merge(vals, on="night", how="inner")
        found = self.db.execute("SELECT night, group_concat(kind || ':' || severity, ' ') FROM findings WHERE subject=? "
                                "GROUP BY night", (str(name),)).fetchall()
        out["findings"] = out["night"].map(dict(found)).astype(object).fillna("")
        return out.sort_values(["started", "night", "metric"]).reset_index(drop=True)

    def _link_series(self, name: Name, nights: pd.DataFrame, wanted: str | None = None) -> pd.DataFrame:
        parts = self.components(name)
        a = [p for p in parts if p["name"] == subject("nic", name.node, name.rail)]
        b = [p for p in parts if p["name"] == subject("nic", name.peer, name.rail)]
        rows = []
        for pa in a:
            for pb in b:
                lo, hi = sorted((pa["id"], pb["id"]))
                key = np.array([(lo << 32) | hi], dtype=np.int64)
                for night in nights.to_dict("records"):
                    for metric in json.loads(night.get("metrics") or "{}"):
                        if wanted and metric != wanted:
                            continue  # one metric asked for: read only its column (a year: 365 reads a metric)
                        v = self.value_at(night, metric, int(key[0]))
                        if v == v:
                            rows.append((night["id"], f"{lo}-{hi}", metric, v))
        return pd.DataFrame(rows, columns=["night", "part", "metric", "value"])


_INSERT_FINDING = ("INSERT INTO findings(night, subject, severity, kind, scope, metric, message, node, rail, peer) "
                   "VALUES (?,?,?,?,?,?,?,?,?,?)")


def _finding_row(night: int, f: dict) -> tuple:
    """A finding as the table keeps it: its subject, and its component's fields (finding_name's)."""
    name = finding_name(f)
    node, rail, peer = (name.node, name.rail, name.peer) if name is not None else (None, f.get("rail"), None)
    return (night, f["subject"], f.get("severity"), f.get("kind"), f.get("scope"), f.get("metric"),
            f.get("message", ""), node, rail, peer)


def _nic_ids(nics: dict, f: pd.DataFrame, end: str) -> np.ndarray:
    """NIC component ids of one end of every link (vectorized through a node x rail table)."""
    nodes = max(i for i, _ in nics) + 1
    rails = max(r for _, r in nics) + 1
    table = np.full((nodes, rails), -1, dtype=np.int64)
    for (i, r), cid in nics.items():
        table[i, r] = cid
    return table[f[end].to_numpy(np.int64), f["rail"].to_numpy(np.int64)]


def _size(f: pd.DataFrame):
    s = f["size"].iloc[0] if len(f) else float("nan")
    return None if s != s else int(s)


def save_column(path: Path, array: np.ndarray) -> None:
    """Written whole or not at all (a reader never maps half a column)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, array)
    os.replace(tmp, path)
