"""One rail's subnet as ibnetdiscover saw it: what following its forwarding tables needs.

A forwarding table says which port of a switch a destination LID leaves by; the cabling says what
that port is cabled to and which node's HCA port owns a LID. Only ibnetdiscover output gives these
(Slurm's files name no port or LID), so only its readers fill ``Fabric.cabling``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Cabling:
    """Switches by node GUID, every cable seen from both ends, and each node's HCA ports with their LIDs."""

    source: str                                     # the ibnetdiscover file read
    switches: dict[int, str] = field(default_factory=dict)  # GUID -> its name, as the rail's Tree names it
    links: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # (GUID, port) -> (GUID, port)
    # node -> its CA ports on this rail: (CA GUID, port, base LID or None where ibnetdiscover showed none)
    hosts: dict[str, list[tuple[int, int, int | None]]] = field(default_factory=dict)
