"""What every reader of the fabric's files shares: errors and notes that name file and line, reading a
file as text, the rail a file is for (rail<N>...), and the messages the InfiniBand tools print about
themselves into a capture taken with 2>&1.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..records.results import InputError


class TopologyFileError(InputError):
    """A switch-tree or routes file that cannot be used: "PATH:LINE: why"."""

    @classmethod
    def at(cls, source: str, line: int | None, why: str) -> TopologyFileError:
        return cls(where(source, line, why))


def where(source: str, line: int | None, why: str) -> str:
    """ "PATH:LINE: why", or "PATH: why" where no line applies: an error's or a note's text."""
    return f"{source}:{line}: {why}" if line else f"{source}: {why}"


def read_text(p: Path, understood: str) -> str:
    """The file's text; TopologyFileError when it is missing, unreadable or binary (`understood`: the
    formats the reader takes, for that message)."""
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TopologyFileError.at(str(p), None, "no such file") from None
    except UnicodeDecodeError:
        raise TopologyFileError.at(str(p), None, f"not a text file; understood: {understood}") from None
    except OSError as e:
        raise TopologyFileError.at(str(p), None, f"cannot read: {e.strerror or e}") from None


_RAIL_NAME = re.compile(r"rail(\d+)(?!\d)", re.IGNORECASE)


def rail_of(name: str) -> int | None:
    """The rail a file name starts with (rail3.txt, RAIL3-ibroute.txt: 3), else None."""
    m = _RAIL_NAME.match(name)
    return int(m.group(1)) if m else None


def rail_files(folder: Path, one_per_rail: str) -> dict[int, Path]:
    """A folder's rail<N> files by rail (other files are not read); TopologyFileError when two files
    claim a rail or none does (`one_per_rail`: what each file holds, for that message)."""
    files: dict[int, Path] = {}
    for f in sorted(folder.iterdir()):
        rail = rail_of(f.name)
        if rail is None or not f.is_file():
            continue
        if rail in files:
            raise TopologyFileError.at(str(folder), None, f"two files for rail {rail}: {files[rail].name} and {f.name}")
        files[rail] = f
    if not files:
        raise TopologyFileError.at(str(folder), None, f"no rail<N> files (a folder holds {one_per_rail} per rail, "
                                                      f"named rail0.txt, rail1.txt, ...)")
    return files


# What the InfiniBand diagnostics and their libraries print about themselves, in a file captured with
# 2>&1: libibmad's "ibwarn: [pid] function: ...", the diags' "ibnetdiscover: iberror: failed: ...",
# libibnetdisc's "query_smp.c:195; ...", the node-name-map reader's "WARNING failed to parse node name
# map ...", and ibroute's / dump_fts' "SubnGet() failed; MAD status ..." for a table block it could not read.
TOOL_MESSAGE = re.compile(r"(ibwarn|ibpanic|ibdebug): \[\d+\]|\S+: iberror: |\S+\.c:\d+; |WARNING failed "
                          r"|SubnGet(\(\w*\))? failed")
