"""What a relaunch's ranks take up (acceptance.cli.attempts writes it): resume.json, named by ENV_RESUME."""

from __future__ import annotations

import json
from pathlib import Path

ENV_RESUME = "ACCEPTANCE_RESUME"  # set for a relaunch's ranks: the path of resume.json


def read_resume(path: str | Path) -> dict:
    """resume.json with rails and rounds as ints: {"attempt", "iteration", "planned" (rail -> the first
    launch's members), "lost" (nodes), "landed" (tests done), "first" (test -> rail -> round to start at)}."""
    data = json.loads(Path(path).read_text())
    data["planned"] = {int(rail): nodes for rail, nodes in data["planned"].items()}
    data["first"] = {test: {int(rail): r for rail, r in rails.items()} for test, rails in data["first"].items()}
    return data
