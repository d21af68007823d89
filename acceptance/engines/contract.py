"""What an engine is, as the drivers use it: small Protocols (one per role, as pytest-xdist's
scheduler protocol), the one result type of a point-to-point operation and that of an incast round.

An engine is a class (MpiEngine, VerbsEngine, NcclEngine), registered by its NAME
(acceptance.engines.registry.register) and made once per process, which keeps its set-up (the
device, settings or GPU configure() chose); OFFERS names the operations it has, from the
catalog's engine_needs (acceptance.rules.catalog Suite), and the registry chooses by it, never by
looking for attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from ..measure.verify import Policy, Tally
from ..rules import catalog

# Every operation an engine may offer: a suite's engine_needs are a subset.
OPERATIONS = frozenset(("PairLink", "IncastGroup", *catalog.COLLECTIVES, "register_times",
                        "registration_growth", "memlock_effect", "gpu_register_times"))
# What an engine can do beyond its operations, declared (CAN) rather than guessed from its name:
# gpu_memory: its PairLink takes memory="cuda" and puts GPU memory on the wire (GPUDirect RDMA);
# net_paths: its own log names the network path of every connection it made (NCCL's INFO lines).
CAPABILITIES = frozenset(("gpu_memory", "net_paths"))


@dataclass
class Transfer:
    """One direction of one size: the origin's times, and what the side that checked found."""

    times_ns: np.ndarray | None  # origin only
    tally: Tally | None  # who verified (the target of writes, the origin of reads): what arrived


@dataclass
class IncastRound:
    """One incast round (IncastGroup.round): what each sender timed, what the receiver saw."""

    times_ns: np.ndarray | None       # a sender's windowed-write iterations
    latency_ns: np.ndarray | None     # the receiver's write round trips to its first sender, under the load
    mismatches: list | None           # receiver only: (sender group rank, Tally of its slots) per sender


@runtime_checkable
class PairLink(Protocol):
    """Two ranks of a pair communicator; both call every method, `origin` (0 or 1) says who acts."""

    def put_bandwidth(self, size: int, iters: int, warmup: int, window: int, origin: int,
                      seed: tuple[int, int, int], budget_s: float | None = None,
                      policy: Policy | None = None) -> Transfer: ...

    def read_bandwidth(self, size: int, iters: int, warmup: int, window: int, origin: int,
                       seed: tuple[int, int, int], budget_s: float | None = None,
                       policy: Policy | None = None) -> Transfer: ...

    # Each latency's times are what the catalog declares for its metric (Metric.timing): a write's
    # and a ping-pong's one-way (half a measured round trip, as ib_write_lat), a read's and an
    # atomic's a full round trip (as ib_read_lat, ib_atomic_lat).
    def put_latency(self, size: int, iters: int, warmup: int, origin: int, seed=None,
                    policy: Policy | None = None) -> Transfer: ...

    def read_latency(self, size: int, iters: int, warmup: int, origin: int, seed=None,
                     policy: Policy | None = None) -> Transfer: ...

    def atomic_latency(self, iters: int, warmup: int, origin: int) -> Transfer: ...

    def pingpong_latency(self, size: int, iters: int, warmup: int, origin: int) -> np.ndarray | None: ...

    def free(self) -> None: ...


@runtime_checkable
class IncastGroup(Protocol):
    """Senders and one receiver of a rail; round() is collective over the group."""

    def round(self, receiver: int, size: int, window: int, budget_s: float, probe_size: int, probe_iters: int,
              seed: Callable) -> IncastRound: ...

    def free(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """An engine: its name, what it offers, whether it can run here, and its set-up."""

    NAME: str
    OFFERS: frozenset
    CAN: frozenset  # of CAPABILITIES

    def available(self) -> tuple[bool, str]: ...

    def configure(self, topology, profile, log_dir=None) -> None: ...

    def used_device(self) -> str | None: ...

    def placement(self) -> str | None: ...  # where this rank runs, where the engine placed it (NUMA)
