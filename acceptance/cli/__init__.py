"""The `acceptance` command line: main() and the parser; each command is its own module (run, report and
compare, doctor, profiles, plan, counters), which adds its subparser."""

from __future__ import annotations

import argparse
import sys
import traceback

from .. import __version__
from . import counters, doctor, history, nodecheck, plan, profiles, report, run
from .common import EPILOG, EXIT_INCOMPLETE, EXIT_USAGE, UsageError
from ..records.results import InputError
from ..rules.profile import ProfileError


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except ProfileError as e:
        print(f"acceptance: profile error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, InputError) as e:
        print(f"acceptance: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # a bug in the harness: show it, and never let it read as "a check failed"
        traceback.print_exc()
        print("acceptance: internal error (the traceback above is a harness bug); exit 3", file=sys.stderr)
        return EXIT_INCOMPLETE


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="acceptance",
        description="Is this GPU cluster's fabric fit for a long training run? Runs collective pytest "
                    "suites under MPI, compares with a thresholds profile, writes a run folder.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"acceptance {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for command in (run, report, doctor, profiles, plan, counters, history, nodecheck):
        command.add_parser(sub)
    return p
