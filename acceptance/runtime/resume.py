"""What a relaunch's ranks take up after a lost node (acceptance.cli.attempts writes it): resume.json,
named by ENV_RESUME. The tests whose records landed are left out; the test in flight walks the first
launch's schedule from its first round not known to have ended (runtime.schedule.Resume)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .schedule import Pairing

if TYPE_CHECKING:  # the CLI reads ENV_RESUME from here without loading pytest
    import pytest

ENV_RESUME = "ACCEPTANCE_RESUME"  # set for a relaunch's ranks: the path of resume.json


def read(path: str | Path) -> dict:
    """resume.json with rails and rounds as ints: {"attempt", "iteration", "planned" (rail -> the first
    launch's members), "lost" (nodes), "landed" (tests done), "first" (test -> rail -> round to start at)}."""
    data = json.loads(Path(path).read_text())
    data["planned"] = {int(rail): nodes for rail, nodes in data["planned"].items()}
    data["first"] = {test: {int(rail): r for rail, r in rails.items()} for test, rails in data["first"].items()}
    return data


def leave_out_landed(config: pytest.Config, items: list[pytest.Item], data: dict) -> None:
    """Deselect the tests whose records landed before the node was lost (the same on every rank)."""
    done = set(data["landed"])
    if any(item.nodeid in done for item in items):
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
        items[:] = [item for item in items if item.nodeid not in done]


def pairing_for(test: str, pairing: Pairing, data: dict) -> Pairing:
    """The run's pairing for `test`: from its first round not known to have ended (0 for a test that had
    not started)."""
    return dataclasses.replace(pairing, resume=dataclasses.replace(pairing.resume, first=data["first"].get(test, {})))
