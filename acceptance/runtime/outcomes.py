"""Merging one test phase's outcome from every rank into one verdict.

Any rank failed -> failed, one section per distinct failure naming the ranks
and nodes that hit it (the first SHOWN_FAILURES; the rest counted, with their
ranks). Outcomes that differ between ranks (a skip on some ranks only) ->
failed as inconsistent: for acceptance testing a rank-local skip means a
broken node. Otherwise every rank agrees and rank 0's report stands.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

SHOWN_RANKS = 16
SHOWN_FAILURES = 16  # distinct failure texts shown in full; the rest are counted


def phase_summary(outcome: str, when: str, xfail: bool, text: str) -> dict:
    """What one rank contributes to the merge: small and picklable."""
    return {"outcome": outcome, "when": when, "xfail": xfail, "text": text}


def describe(ranks: list[int], labels: Mapping[int, str]) -> str:
    """'ranks [1@node1, 3@node2]', shortened for thousands of ranks."""
    shown = [labels.get(r, str(r)) for r in ranks[:SHOWN_RANKS]]
    more = f", ... and {len(ranks) - SHOWN_RANKS} more" if len(ranks) > SHOWN_RANKS else ""
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{word} [{', '.join(shown)}{more}]"


def headline(text: str, limit: int = 300) -> str:
    """The line of a pytest report that says what went wrong: its first `E ` line (the assertion or
    exception), else its last non-empty line; shortened to `limit` characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = []
    for line in (line[1:].strip() for line in lines if line.startswith("E ")):
        if line.startswith(("assert ", "+  where")) or len(errors) == 3:  # pytest's re-evaluation follows
            break
        errors.append(line)
    said = " | ".join(errors) if errors else (lines[-1] if lines else "no message")
    return said if len(said) <= limit else said[:limit - 3] + "..."


def failure_headline(decision: dict, summaries: Mapping[int, dict]) -> str:
    """One line for a merged failure: the first failing rank's headline, or the inconsistency."""
    failed = [summaries[r] for r in decision["ranks"] if summaries[r]["outcome"] == "failed"]
    if failed:
        return headline(failed[0]["text"])
    text = decision["longrepr"] or ""
    return "inconsistent outcome across ranks: " + "; ".join(line.strip() for line in text.splitlines()[1:3])


def _kind(s: dict) -> str:
    return ("x" if s["xfail"] else "") + s["outcome"]


def merge(summaries: Mapping[int, dict], labels: Mapping[int, str]) -> dict:
    """Decision sent to every rank: {"outcome", "longrepr", "ranks"}.

    `longrepr` is None when ranks agree and rank 0's own report stands.
    `ranks` lists the ranks that failed or that differed from the majority.
    """
    by_text: dict[str, list[int]] = defaultdict(list)
    for rank in sorted(summaries):
        s = summaries[rank]
        if s["outcome"] == "failed":
            by_text[s["text"]].append(rank)
    if by_text:
        failing = sorted(r for ranks in by_text.values() for r in ranks)
        groups = sorted(by_text.items(), key=lambda kv: kv[1][0])
        sections = [f"---- failed on {describe(ranks, labels)} ----\n{text.rstrip()}"
                    for text, ranks in groups[:SHOWN_FAILURES]]
        if len(groups) > SHOWN_FAILURES:
            # Rank 0 answers every rank with this text: one section per rank would make it O(N) and
            # the answers O(N^2) (every rank failing with its own numbers in its message).
            rest = sorted(r for _, ranks in groups[SHOWN_FAILURES:] for r in ranks)
            sections.append(f"---- and {len(groups) - SHOWN_FAILURES} more distinct failures, on "
                            f"{describe(rest, labels)}: texts not shown ----")
        head = f"failed on {describe(failing, labels)} of {len(summaries)}"
        return {"outcome": "failed", "longrepr": head + "\n" + "\n".join(sections), "ranks": failing}

    kinds: dict[str, list[int]] = defaultdict(list)
    for rank in sorted(summaries):
        kinds[_kind(summaries[rank])].append(rank)
    if len(kinds) == 1:
        return {"outcome": summaries[min(summaries)]["outcome"], "longrepr": None, "ranks": []}

    majority = max(kinds.values(), key=len)
    lines = []
    for kind, ranks in sorted(kinds.items(), key=lambda kv: kv[1][0]):
        reason = summaries[ranks[0]]["text"].strip().splitlines()
        why = f": {reason[-1]}" if reason and kind != "passed" else ""
        lines.append(f"  {kind} on {describe(ranks, labels)}{why}")
    odd = sorted(r for ranks in kinds.values() if ranks is not majority for r in ranks)
    return {"outcome": "failed",
            "longrepr": "inconsistent outcome across ranks (a rank-local skip or xfail means that node differs):\n"
                        + "\n".join(lines),
            "ranks": odd}


def collection_message(groups: dict, lists: dict, labels: Mapping[int, str]) -> str:
    """Why the ranks' collections differ: groups (digest -> ranks), lists (a speaker rank -> its test ids)."""
    base_ranks = next(ranks for ranks in groups.values() if 0 in ranks)
    base = set(lists[0])
    lines = ["collected tests differ between ranks; all ranks must collect the same tests "
             "(fix: a fixed PYTHONHASHSEED, the same checkout on every node, no rank-dependent parametrize)",
             f"  {describe(base_ranks, labels)}: {len(lists[0])} tests"]
    for ranks in groups.values():
        if ranks is base_ranks:
            continue
        other = set(lists[ranks[0]])
        lines.append(f"  {describe(ranks, labels)}: {len(other)} tests")
        for nodeid in sorted(other - base)[:10]:
            lines.append(f"    only there: {nodeid}")
        for nodeid in sorted(base - other)[:10]:
            lines.append(f"    missing there: {nodeid}")
    return "\n".join(lines)
