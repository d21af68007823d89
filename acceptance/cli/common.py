"""What every command shares: exit codes, the usage error, argument types, the epilog of --help."""

from __future__ import annotations

import argparse
from pathlib import Path


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3

EPILOG = """\
exit codes: 0 all checks passed, 1 a check failed, 2 usage or input error,
            3 incomplete (hang, crash, lost rank)

examples:
  acceptance run                          embedded default: 4 local ranks as 2 nodes x 2 rails
  acceptance run -- -m preflight          only the preflight suite (pytest args after --)
  acceptance run --profile h100.toml      inside `salloc`/`sbatch`: srun over the allocation
  acceptance run --duration 8h            burn-in: repeat the suites for 8 hours
  acceptance report reports/<run-id>      re-analyze a run: findings.json, drain.txt, report.html
  acceptance compare RUN BASELINE         per-link changes against a good earlier run
  acceptance doctor                       what this machine offers (MPI, Slurm, RDMA, GPUs)
  acceptance node-check --slurm           this node in seconds; Slurm's HealthCheckProgram
  acceptance profiles show local          the thresholds a profile resolves to
  acceptance counters diff A.json B.json  which port counters rose between two snapshots
  acceptance history check reports/<id>   tonight against the pinned run and the last accepted nights
"""


class UsageError(Exception):
    pass


def seconds(text: str) -> float:
    from ..rules.units import positive_seconds
    try:
        return positive_seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def run_folder(path: str) -> Path:
    """RUN_DIR of a command: a folder with run.json and results.jsonl, else a UsageError."""
    folder = Path(path)
    for needed in ("run.json", "results.jsonl"):
        if not (folder / needed).is_file():
            raise UsageError(f"{folder}: not a run folder ({needed} missing)")
    return folder
