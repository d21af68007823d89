"""RUN_DIR/history.json, the file `acceptance history check` leaves in the run folder: the night's
history findings (drift, intermittent, recovered, trend), each with its subject and series, and the
references it was judged against. The report and the Prometheus export read it from here.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..records.results import InputError

CHECK_FILE = "history.json"
SHOWN_KINDS = ("drift", "intermittent")  # the findings that name a part: a series each in the report and Prometheus


def read_check(run_dir) -> dict | None:
    """The history check of a run folder; None when `history check` has not been run there (no file).
    InputError (naming the file) when it cannot be read or is not what `history check` writes."""
    path = Path(run_dir) / CHECK_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"{path}: cannot read the history check: {e.strerror or e}") from None
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON ({e}); rerun `acceptance history check`") from None
    if not isinstance(data, dict) or not isinstance(data.get("findings", []), list) \
            or not all(isinstance(f, dict) for f in data.get("findings", [])):
        raise InputError(f"{path}: not a history check (no findings list); rerun `acceptance history check`")
    data.setdefault("findings", [])
    return data


def check_problem(check: dict, run_id) -> str | None:
    """Why a history check does not speak for the run `run_id` (None: it does)."""
    theirs = check.get("run_id")
    if run_id and theirs and str(theirs) != str(run_id):
        return f"{CHECK_FILE} is the history check of run {theirs}, not of this run ({run_id})"
    return None
