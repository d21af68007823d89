"""The node check's state between runs: one JSON file per node (the counters' last snapshot, the kernel
log's cursor, Xid events still calling for action, the passes in a row), read and replaced under an
exclusive lock, since a health check and a prolog may overlap."""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

ENV_STATE = "ACCEPTANCE_NODE_CHECK_STATE"
STATE_FORMAT = "acceptance-node-check/1"


class StateError(Exception):
    """The state cannot be kept: the folder is not writable, or another node check holds the lock."""


def state_dir(given: str | None) -> Path:
    if given or os.environ.get(ENV_STATE):
        return Path(given or os.environ[ENV_STATE])
    if os.geteuid() == 0:
        return Path("/var/lib/acceptance/node-check")
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "acceptance" / "node-check"


class StateFile:
    """One node's state; a file another version or a crash left unreadable starts afresh."""

    def __init__(self, folder: Path, node: str, wait: float):
        self.path = folder / f"{node}.json"
        self.node = node
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._lock = open(folder / f".{node}.lock", "a")
        except OSError as e:
            raise StateError(f"{folder}: cannot keep node-check's state there ({e.strerror or e}); name a "
                             f"writable folder with --state or ${ENV_STATE}") from None
        end = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise StateError(f"{self.path}: another node-check holds its lock ({self._lock.name}); "
                                     f"nothing checked") from None
                time.sleep(0.1)
        try:
            data = json.loads(self.path.read_text())
            ok = isinstance(data, dict) and data.get("format") == STATE_FORMAT and data.get("node") == node
        except (OSError, ValueError):
            ok = False
        self.data = data if ok else {"format": STATE_FORMAT, "node": node, "checks": {}, "passes": 0}

    def save(self) -> None:
        self.data["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        try:
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.path)
        except OSError as e:
            raise StateError(f"{self.path}: cannot write node-check's state ({e.strerror or e}); nothing "
                             f"was changed on the node") from None
