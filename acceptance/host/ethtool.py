"""`ethtool -S`: a RoCE port's netdev statistics (PFC pause, PHY errors, drops), parsed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

ENV_ETHTOOL = "ACCEPTANCE_ETHTOOL"
ETHTOOL_TIMEOUT = 10.0  # seconds per `ethtool -S`; a wedged driver must not hang a suite
# Per-queue software counters of the Ethernet driver (rx0_packets, tx12_bytes, ch3_events, ...): RoCE
# traffic bypasses these rings, and mlx5 prints thousands of them, so snapshots leave them out.
PER_QUEUE = re.compile(r"^(?:rx|tx|ch|qos_tx|ptp_(?:rx|tx|cq|ch))\d+_")


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """`ethtool -S` output ("NIC statistics:" then "     name: value" lines) -> {name: value}.

    Lines whose value is not an integer (headers, driver notes) are ignored.
    """
    stats: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, value = line.rpartition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            continue
        try:
            stats[name] = int(value)
        except ValueError:
            continue
    return stats


class EthtoolError(Exception):
    pass


class EthtoolMissing(EthtoolError):
    """The ethtool command itself is not there: no point asking again for the next netdev."""


def ethtool_stats(netdev: str, command: str | None = None, timeout: float = ETHTOOL_TIMEOUT) -> dict[str, int]:
    """`ethtool -S netdev` parsed; EthtoolError (with a readable reason) when it cannot be had.

    The command is ACCEPTANCE_ETHTOOL (e.g. "sudo -n ethtool"), else "ethtool".
    """
    command = command or os.environ.get(ENV_ETHTOOL) or "ethtool"
    argv = [*shlex.split(command), "-S", netdev]
    try:
        p = subprocess.run(argv, check=False, capture_output=True, text=True, errors="replace", timeout=timeout)
    except FileNotFoundError:
        raise EthtoolMissing(f"{argv[0]} not found: install ethtool (or set {ENV_ETHTOOL}); "
                           f"RoCE pause, PHY error and drop counters were not read") from None
    except subprocess.TimeoutExpired:
        raise EthtoolError(f"`{shlex.join(argv)}` did not answer within {timeout:g} s") from None
    except OSError as e:
        raise EthtoolError(f"`{shlex.join(argv)}` could not start: {e.strerror or e}") from None
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["no message"])[0]
        raise EthtoolError(f"`{shlex.join(argv)}` exited {p.returncode}: {why}")
    stats = parse_ethtool_stats(p.stdout)
    if not stats:
        raise EthtoolError(f"`{shlex.join(argv)}` printed no statistics")
    return stats
