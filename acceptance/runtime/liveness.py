"""A rank's connection to `acceptance run` on the same machine, held until the rank's process ends.

The local launcher's ranks all run beside `acceptance run`; each connects once, says its rank, and
never writes again. The kernel closes the connection when the process exits, however it exits
(SIGKILL, the OOM killer, a segfault), and before the launcher can notice and stop the other ranks,
so `acceptance run` learns which rank ended first (acceptance.cli.lost.DeathWatch).
"""

from __future__ import annotations

import os
import socket

ENV_LIVENESS = "ACCEPTANCE_LIVENESS_SOCKET"  # "@name": an abstract Unix socket
_held: list[socket.socket] = []


def announce(rank: int) -> None:
    """Connect and say this rank, where `acceptance run` listens; nothing otherwise, or on any error
    (the watch is a diagnosis, never a reason for a rank to fail)."""
    address = os.environ.get(ENV_LIVENESS)
    if not address or _held:
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # close-on-exec: the rank's own
    try:
        sock.connect("\0" + address[1:] if address.startswith("@") else address)
        sock.sendall(f"{rank}\n".encode())
    except OSError:
        sock.close()
        return
    _held.append(sock)
