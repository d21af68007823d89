"""A lost node is left behind, not the run: after a launch that lost nodes (a rank killed, its node down,
a hang of its ranks alone), `acceptance run` launches the work left again on the surviving nodes, in the
same run folder and, under Slurm, the same allocation (srun --exclude).

What is left: the tests whose records had not landed, and of the test in flight the rounds that had not
ended. A pairwise suite's rounds run in step on each rail (every rank of the rail meets at the start of
a round), so a record of round r says that every round before r ended on its rail: those records are
kept; the records of round r and after, and of the test's other phases, are set aside in
logs/superseded.jsonl, and the relaunch measures the first launch's schedule from round r on, without
the lost nodes' pairs (runtime.schedule.Resume). A test with no round in its records runs again whole.

run.json keeps each launch in `attempts` (its nodes, start and end, exit code, the nodes it left behind and
why, and its own run.json fields of the loss: lost, lost_nodes, missing_ranks, hang); the ranks of
a relaunch read resume.json (RESUME_FILE), written here (runtime.resume reads it). A relaunch stops after run.attempts launches,
or once more than run.lost_max of the nodes are lost: the run is then INCOMPLETE."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ..records.naming import natural_key
from ..records.results import FAILED_METRIC, RunFolder

RESUME_FILE = "resume.json"
SUPERSEDED = "superseded.jsonl"
# What a launch's own fields are in run.json; each moves into its `attempts` entry before a relaunch.
PER_LAUNCH = ("lost_nodes", "missing_ranks", "silent_ranks", "hang", "lost", "launcher_exit_code")


@dataclass(frozen=True)
class Decision:
    """Whether to launch again, on which nodes, and why (or why not) in words."""

    again: bool
    lost: tuple[str, ...]       # every node lost so far, in all launches
    survivors: tuple[str, ...]
    why: str


def launch_lost(run: dict) -> list[tuple[str, str]]:
    """analysis.lost's, imported when a launch ended INCOMPLETE: the analysis package loads pandas, which
    every command would otherwise pay for (node-check runs on every node every few minutes)."""
    from ..analysis.lost import launch_lost as lost
    return lost(run)


def decide(run: dict, attempt: int, profile, iteration: int = 0) -> Decision:
    """After launch `attempt` (1 first) of pass `iteration` ended INCOMPLETE: launch again on the
    survivors when a node was lost, launches are left (run.attempts) and no more than run.lost_max of
    the run's nodes are lost (in any pass of a burn-in)."""
    planned = planned_nodes(run, None)  # the run's: the share lost counts every pass
    lost_now = [node for node, _ in launch_lost(run)]
    earlier = [e["node"] for a in run.get("attempts") or [] for e in a.get("left_behind") or []]
    lost = tuple(dict.fromkeys(earlier + lost_now))
    survivors = tuple(n for n in planned_nodes(run, iteration) if n not in lost)
    allowed, share = profile.get("run.attempts"), profile.get("run.lost_max")
    if not lost_now:
        why = "no single node was lost (a hang over several nodes, a stop, or a harness error)"
    elif attempt >= allowed:
        why = f"{attempt} of run.attempts = {allowed} launches made"
    elif len(lost) > share * len(planned):
        why = (f"{len(lost)} of {len(planned)} nodes lost, more than run.lost_max = {share:g} of them "
               f"(a fabric or power event, not a node's)")
    elif len(survivors) < 2:
        why = "fewer than two nodes left"
    else:
        return Decision(True, lost, survivors, f"{', '.join(lost_now)} lost: launching what is left again on "
                                               f"{len(survivors)} nodes (launch {attempt + 1} of {allowed})")
    return Decision(False, lost, survivors, f"not launching again: {why}")


def _first_launch(run: dict, iteration: int | None) -> dict | None:
    """The `attempts` entry of the first launch of pass `iteration` (None: of the run)."""
    return next((a for a in run.get("attempts") or [] if a.get("attempt") == 1
                 and (iteration is None or a.get("iteration", 0) == iteration)), None)


def planned_nodes(run: dict, iteration: int | None = None) -> list[str]:
    """The nodes of the first launch of pass `iteration` (None: of the run), natural order."""
    first = _first_launch(run, iteration)
    return list(first["nodes"]) if first else sorted(((run.get("topology") or {}).get("nodes") or {}), key=natural_key)


def planned_rails(run: dict, iteration: int = 0) -> dict[int, list[str]]:
    """Each rail's members in the first launch of pass `iteration` (whose schedule its relaunch keeps)."""
    first = _first_launch(run, iteration)
    if first and first.get("rails"):
        return {int(rail): list(nodes) for rail, nodes in first["rails"].items()}
    return _rails(run)


def _rails(run: dict) -> dict[int, list[str]]:
    """Each rail's members in the launch run.json's topology is of, natural order."""
    members: dict[int, set] = defaultdict(set)
    for r in (run.get("topology") or {}).get("ranks") or []:
        members[int(r["rail"])].add(r["node"])
    return {rail: sorted(nodes, key=natural_key) for rail, nodes in sorted(members.items())}


class Cut:
    """Which of the test in flight's salvaged records a relaunch measures again (RunFolder.salvage's
    `cut`), and from which round each (test, rail) takes up again."""

    def __init__(self):
        self.first: dict[str, dict[int, int]] = {}
        self.tests: set[tuple[str, int]] = set()   # (test, iteration) in flight: none of their records landed

    def __call__(self, records: list[dict]) -> set[int]:
        reached: dict[tuple[str, int], int] = {}
        for rec in records:
            self.tests.add((rec.get("test"), rec.get("iteration")))
            if rec.get("round") is not None and rec.get("rail") is not None:
                key = (rec["test"], int(rec["rail"]))
                reached[key] = max(reached.get(key, 0), int(rec["round"]))
        for (test, rail), r in reached.items():
            self.first.setdefault(test, {})[rail] = r
        return {j for j, rec in enumerate(records)
                if rec.get("round") is None or rec.get("rail") is None
                or int(rec["round"]) >= reached[(rec["test"], int(rec["rail"]))]}


def landed_tests(folder: RunFolder, iteration: int, superseded: set[str]) -> list[str]:
    """The tests of `iteration` whose records landed in results.jsonl (RunFolder.landed: rank 0 marks
    each test as it writes its records), less those measured again."""
    return sorted(folder.landed(iteration) - superseded)


def set_aside_failures(folder: RunFolder, tests: set[tuple[str, int]]) -> int:
    """A test measured again keeps no test_failed record from the launch that lost a node (rank 0 writes
    it as soon as a phase fails, the lost peer's doing): moved from results.jsonl to logs/superseded.jsonl."""
    if not tests or not folder.results.exists():
        return 0
    keys = {t for t, _ in tests}
    tmp = folder.results.with_suffix(".jsonl.tmp")
    moved = []
    with open(folder.results, errors="replace") as src, open(tmp, "w") as dst:
        for line in src:
            if f'"{FAILED_METRIC}"' in line:
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = {}
                if rec.get("test") in keys and (rec.get("test"), rec.get("iteration")) in tests:
                    moved.append(line)
                    continue
            dst.write(line)
        dst.flush()
        os.fsync(dst.fileno())
    if not moved:
        tmp.unlink()
        return 0
    with open(folder.path / "logs" / SUPERSEDED, "a") as f:
        f.writelines(moved)
    os.replace(tmp, folder.results)
    return len(moved)


def record_launch(folder: RunFolder, attempt: int, start: str, end: str, again: bool, iteration: int = 0) -> dict:
    """Keep launch `attempt` of pass `iteration` in run.json's `attempts` (its nodes, start and end, exit
    code, what it lost and why); with `again`, its own fields are then cleared for the next launch."""
    run = folder.read_run()
    entry = {"attempt": attempt, "iteration": iteration,
             "nodes": sorted((run.get("topology") or {}).get("nodes") or {}, key=natural_key),
             "start": start, "end": end, "exit_code": run.get("exit_code"),
             "left_behind": [{"node": node, "why": why} for node, why in launch_lost(run)],
             **{key: run[key] for key in PER_LAUNCH if run.get(key) not in (None, [], "")}}
    if attempt == 1:  # the schedule every relaunch of this pass keeps
        entry["rails"] = {str(rail): nodes for rail, nodes in _rails(run).items()}
    attempts = [*(run.get("attempts") or []), entry]
    if not again:
        return folder.update_run(attempts=attempts)
    return folder.update_run(attempts=attempts, lost_nodes=[], missing_ranks=[], silent_ranks=[], hang=None, lost=None,
                             launcher_exit_code=None, complete=False, end=None, exit_code=None)


def write_resume(folder: RunFolder, run: dict, attempt: int, iteration: int, decision: Decision, cut: Cut) -> Path:
    """resume.json for the relaunch's ranks: the first launch's rails, the nodes lost, the tests done
    and where the test in flight takes up again."""
    superseded = {t for t, i in cut.tests if i == iteration}
    data = {"attempt": attempt, "iteration": iteration,
            "planned": {str(rail): nodes for rail, nodes in planned_rails(run, iteration).items()},
            "lost": list(decision.lost),
            "landed": landed_tests(folder, iteration, superseded),
            "first": {test: {str(rail): r for rail, r in rails.items()} for test, rails in cut.first.items()}}
    path = folder.path / RESUME_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    os.replace(tmp, path)
    return path
