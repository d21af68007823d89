"""The `verbs` engine: RC queue pairs through pyverbs, rdma-core's Python bindings.

Same interface as the `mpi` engine (NAME, available, register_times,
registration_growth, PairLink, IncastGroup), plus `configure`, which picks this
rank's RDMA device (the one on its rail) and the [verbs] profile settings.

Memory registration is ibv_reg_mr / ibv_dereg_mr on page-aligned numpy
buffers. Point-to-point traffic follows perftest (linux-rdma/perftest
src/perftest_resources.c): windowed RDMA WRITE / READ bandwidth with at most
tx_depth work requests in flight and one completion every cq_mod of them
(run_iter_bw); write latency as ib_write_lat (both sides spin on the last byte
of their receive buffer, run_iter_lat_write); send, write-with-immediate, read
and atomic latencies as ib_send_lat / ib_write_lat --write_with_imm /
ib_read_lat / ib_atomic_lat. Connection setup is perftest's: path MTU = the
smaller active MTU of the two ports, timeout 14, retry 7, RNR retry 7, min RNR
timer 12, outstanding reads negotiated from both devices.

Incast (IncastGroup) joins every two ranks of a group by a PairLink: in a round
each sender posts ib_write_bw's windowed RDMA WRITEs into its own area of the
receiver's memory, with no exchange with the receiver while they run, and the
receiver times signaled writes to its first sender, each posted and polled to its
completion (a full round trip, as the mpi engine's Put + Flush); the receiver
checks every sender's slots afterwards.

Each latency is what the catalog declares for its metric (Metric.timing), as
in the mpi engine: put_latency, pingpong_latency and write_imm_latency are
one-way, perftest's half round trip (RTT / 2); read_latency and atomic_latency
are a full round trip (perftest's rtt_factor).

One module per concern: binding (pyverbs, imported once), errors, device
(discovery, availability and this rank's configuration), memreg (registration),
qp (GIDs and the queue pair's attributes), wr (work requests, the posting
window, waits), link (PairLink) and incast (IncastGroup, a PairLink per pair of
the group). Everything that is not a device call is a small function or builder
that works with the real pyverbs classes and no device, so the attribute and
work request objects the engine posts are unit-tested where no RDMA hardware is.
"""

from __future__ import annotations

from ..registry import register
from . import memreg
from .device import Config, Settings, available, configuration
from .errors import VerbsError
from .incast import IncastGroup as Incast
from .link import PairLink as Link


@register
class VerbsEngine:
    """The verbs engine of one process (acceptance.engines.registry): this rank's device and [verbs]
    settings, set once by configure(), and every operation it offers on them."""

    NAME = "verbs"
    # What this engine can do (acceptance.engines.contract.OPERATIONS); collectives run on mpi or nccl.
    OFFERS = frozenset(("PairLink", "IncastGroup", "register_times", "registration_growth", "memlock_effect",
                        "gpu_register_times"))
    CAN = frozenset(("gpu_memory",))  # PairLink(memory="cuda"): GPU memory registered and written
    available = staticmethod(available)

    def __init__(self, config: Config | None = None):
        self.config = config

    def configure(self, topology, profile, log_dir=None) -> None:
        """Pick this rank's device (by rail) and read [verbs]; once per rank before any measurement."""
        self.config = configuration(topology, profile)

    def use(self, device: str, settings: Settings | None = None, oversubscribed: bool = False) -> None:
        """Measure through `device` with `settings` (configure() picks both from the topology and profile)."""
        self.config = Config(device, settings or Settings(), oversubscribed)

    def configured(self) -> Config:
        if self.config is None:
            raise VerbsError("the verbs engine is not configured: configure(topology, profile) must run first")
        return self.config

    def used_device(self) -> str | None:
        """The RDMA device this rank measures through, once configured."""
        return self.config.device if self.config is not None else None

    def placement(self) -> str | None:
        """This rank's NUMA placement by its device (acceptance.host.numa), once configured."""
        return self.config.placement if self.config is not None else None

    def PairLink(self, comm, max_size: int, slot_bytes: int = 0, memory: str = "host") -> Link:  # noqa: N802 - the role's name
        return Link(comm, max_size, slot_bytes, memory, config=self.configured())

    def IncastGroup(self, comm, size: int, window: int = 1, slot_bytes: int = 0) -> Incast:  # noqa: N802 - the role's name
        return Incast(comm, size, window, slot_bytes, config=self.configured())

    def register_times(self, nbytes: int, repeats: int, how: str):
        return memreg.register_times(self.configured(), nbytes, repeats, how)

    def registration_growth(self, nbytes: int, cycles: int) -> int:
        return memreg.registration_growth(self.configured(), nbytes, cycles)

    def memlock_effect(self, nbytes: int) -> tuple[bool, str]:
        return memreg.memlock_effect(self.configured(), nbytes)

    def gpu_register_times(self, nbytes: int, repeats: int):
        return memreg.gpu_register_times(self.configured(), nbytes, repeats)


__all__ = ["Config", "Settings", "VerbsEngine", "available"]
