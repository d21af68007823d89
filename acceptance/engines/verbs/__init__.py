"""The `verbs` engine: RC queue pairs through pyverbs, rdma-core's Python bindings.

Same interface as the `mpi` engine (NAME, available, register_times,
registration_growth, PairLink), plus `configure`, which picks this rank's RDMA
device (the one on its rail) and the [verbs] profile settings.

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

Latency units differ between the engines: the mpi engine's put latency is a
full Put + Flush round trip; this engine's put_latency, pingpong_latency and
write_imm_latency are perftest's half round trip (RTT / 2), while
read_latency and atomic_latency are a full round trip (perftest's rtt_factor).

One module per concern: binding (pyverbs, imported once), errors, device
(discovery, availability and this rank's configuration), memreg (registration),
qp (GIDs and the queue pair's attributes), wr (work requests, the posting
window, waits) and link (PairLink). Everything that is not a device call is a
small function or builder that works with the real pyverbs classes and no
device, so the attribute and work request objects the engine posts are
unit-tested where no RDMA hardware is.
"""

from __future__ import annotations

from .device import available, configure, used_device
from .link import PairLink
from .memreg import gpu_register_times, memlock_effect, register_times, registration_growth

NAME = "verbs"
# What this engine can do (acceptance.engines.contract.OPERATIONS); collectives run on mpi or nccl.
OFFERS = frozenset(("PairLink", "register_times", "registration_growth", "memlock_effect", "gpu_register_times"))

__all__ = ["NAME", "OFFERS", "PairLink", "available", "configure", "gpu_register_times", "memlock_effect",
           "register_times", "registration_growth", "used_device"]
