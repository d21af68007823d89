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

Everything that is not a device call is a small function or builder below that
works with the real pyverbs classes and no device, so the attribute and work
request objects the engine posts are unit-tested where no RDMA hardware is.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import mmap
import os
import random
import resource
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import numpy as np

from ..host import nics
from ..measure import Tally, timed, timed_capped, timed_sequence
from ..measure.verify import Policy, Slots, WriteCheck, batched, planned_batches
from . import gpumem
from .memory import allocate, counter_tally, fetched_tally, fill_pattern, poison, slot_tally
from .contract import Transfer
from .mpi import resident_bytes

NAME = "verbs"
# What this engine can do (acceptance.engines.contract.OPERATIONS); collectives run on mpi or nccl.
OFFERS = frozenset(("PairLink", "register_times", "registration_growth", "memlock_effect", "gpu_register_times"))

try:  # pyverbs builds against one rdma-core; without it the engine says why it cannot run.
    try:  # rdma-core >= v50 (and the only one from v59, Cython >= 3.1)
        import pyverbs.libibverbs_enums as e
    except ImportError:  # rdma-core <= v58, e.g. Debian 12's 44.0
        import pyverbs.enums as e
    from pyverbs.addr import GID, AHAttr, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context, get_device_list
    from pyverbs.mr import MR, DmaBufMR
    from pyverbs.pd import PD
    from pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, RecvWR, SendWR
    IMPORT_ERROR: BaseException | None = None
except Exception as exc:  # noqa: BLE001 - ImportError, or OSError when libibverbs itself is missing
    IMPORT_ERROR = exc

# perftest's constants (src/perftest_parameters.h, src/perftest_resources.h).
MIN_RNR_TIMER = 12          # MIN_RNR_TIMER: the encoded RNR NAK timer 12 = 0.64 ms
INLINE_WRITE = 220          # DEF_INLINE_WRITE: writes and sends up to this size go inline
RX_DEPTH = 16               # receives kept posted for SEND / WRITE_WITH_IMM
POLL_BATCH = 16             # completions taken per poll
MAX_SLOTS = 1024            # distinct slots (prebuilt WRs) of one verified batch
SPIN_TIMEOUT_S = 30.0       # a wait for the peer or a completion gives up after this long
IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"
GID_TYPE_ROCE_V2 = 1        # IBV_GID_TYPE_SYSFS_ROCE_V2; sysfs gid_attrs/types says "RoCE v2"
SYS_INFINIBAND = "/sys/class/infiniband"


class VerbsError(Exception):
    """The verbs engine cannot do what was asked; str() says why and what to check."""


class CompletionError(VerbsError):
    """A work completion came back with an error status."""

    def __init__(self, wc, what: str | None = None):
        self.status = int(wc.status)
        self.status_name = enum_name("ibv_wc_status", self.status)
        self.wr_id = int(wc.wr_id)
        self.vendor_err = int(getattr(wc, "vendor_err", 0) or 0)
        super().__init__(describe_completion(self.status, self.wr_id, self.vendor_err, what))


# ---- enums ----------------------------------------------------------------------


def enum_name(enum_class: str, value: int) -> str:
    """The member name of `value` in pyverbs' enum class (e.g. IBV_WC_RETRY_EXC_ERR), or "<class> <value>"."""
    cls = getattr(e, enum_class, None)
    if cls is not None:
        try:
            return cls(int(value)).name
        except (ValueError, TypeError, AttributeError):
            pass
    return f"{enum_class} {int(value)}"


def mtu_bytes(mtu: int) -> int:
    """ibv_mtu value -> bytes (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5)."""
    return 128 << int(mtu)


# ---- settings and device choice ---------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The profile's [verbs] section."""

    port: int = 1
    gid_index: int = -1
    traffic_class: int = 0
    hop_limit: int = 64
    service_level: int = 0
    tx_depth: int = 128
    cq_mod: int = 100
    timeout: int = 14
    retry_count: int = 7
    rnr_retry: int = 7

    def __post_init__(self):
        ranges = {"port": (1, 255), "gid_index": (-1, 1 << 16), "traffic_class": (0, 255),
                  "hop_limit": (0, 255), "service_level": (0, 15), "tx_depth": (1, 1 << 20),
                  "cq_mod": (1, 1 << 20), "timeout": (0, 31), "retry_count": (0, 7), "rnr_retry": (0, 7)}
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if not isinstance(value, int) or not low <= value <= high:
                raise VerbsError(f"[verbs] {name} = {value!r}: expected an integer in {low}..{high}")

    @classmethod
    def from_profile(cls, profile) -> Settings:
        return cls(**{f.name: profile.get(f"verbs.{f.name}") for f in fields(cls)})


@dataclass(frozen=True)
class Config:
    device: str
    settings: Settings
    # More ranks on this host than CPUs for them (virtual nodes, an emulator's guest): polling loops
    # give the CPU away between empty polls, as Open MPI does when oversubscribed (mpi_yield_when_idle).
    # A rank spinning on a CPU that its peer, or the kernel's RDMA work (rxe), needs would otherwise
    # hold it for a whole time slice: milliseconds per round trip, on some pairs and not others.
    oversubscribed: bool = False


_config: Config | None = None


def _no_devices_hint() -> str:
    if not os.path.isdir(SYS_INFINIBAND):
        return f"no {SYS_INFINIBAND}: no RDMA device or driver"
    return (f"{SYS_INFINIBAND} exists: is the verbs provider installed (ibverbs-providers, MLNX_OFED) "
            "and /dev/infiniband/uverbs* readable?")


def device_names() -> list[str]:
    """This host's RDMA device names; VerbsError with the reason when pyverbs or the devices are missing."""
    if IMPORT_ERROR is not None:
        raise VerbsError(f"pyverbs not importable: {IMPORT_ERROR}")
    try:
        devices = get_device_list()
    except PyverbsError as exc:
        raise VerbsError(f"get_device_list() failed: {exc} ({_no_devices_hint()})") from exc
    return [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devices]


def port_state_name(state: int) -> str:
    return enum_name("ibv_port_state", state).removeprefix("IBV_PORT_")


def link_layer_name(link_layer: int) -> str:
    if IMPORT_ERROR is None and link_layer == e.IBV_LINK_LAYER_ETHERNET:
        return "Ethernet"
    return "InfiniBand"  # IBV_LINK_LAYER_INFINIBAND, and UNSPECIFIED (0), which libibverbs treats as IB


def describe_device(name: str, ports: Iterable[tuple[int, int, int]]) -> str:
    """'mlx5_0 (port 1 ACTIVE, InfiniBand)' from (port, state, link layer) rows."""
    parts = [f"port {p} {port_state_name(s)}, {link_layer_name(ll)}" for p, s, ll in ports]
    return f"{name} ({'; '.join(parts)})" if parts else f"{name} (no ports)"


def available() -> tuple[bool, str]:
    """(usable, why): pyverbs imports and at least one RDMA device is listed and opens. Never raises."""
    try:
        names = device_names()
    except VerbsError as exc:
        return False, str(exc)
    except Exception as exc:  # noqa: BLE001 - a broken binding must not take the harness down
        return False, f"get_device_list() failed: {type(exc).__name__}: {exc}"
    if not names:
        return False, f"no RDMA devices ({_no_devices_hint()})"
    shown, opened = [], 0
    for name in names:
        try:
            with Context(name=name) as ctx:
                count = ctx.query_device().phys_port_cnt
                ports = []
                for p in range(1, count + 1):
                    attr = ctx.query_port(p)
                    ports.append((p, attr.state, attr.link_layer))
            shown.append(describe_device(name, ports))
            opened += 1
        except Exception as exc:  # noqa: BLE001 - one unopenable device is reported, not raised
            shown.append(f"{name} (cannot open: {exc})")
    if not opened:
        return False, f"{len(names)} device(s), none can be opened: " + ", ".join(shown)
    return True, f"{len(names)} device(s): " + ", ".join(shown)


def pick_device(devices: Iterable[str], topology, nic_rails) -> str:
    """This rank's device among the host's `devices`: the one serving the rank's rail (acceptance.host.nics)."""
    device, why = nics.rail_device(topology, nic_rails, devices)
    if device is None:
        raise VerbsError(why)
    return device


def configure(topology, profile, log_dir=None) -> None:
    """Pick this rank's device (by rail) and read [verbs]; called once per rank before any measurement."""
    settings = Settings.from_profile(profile)
    try:
        names = device_names()
    except VerbsError as exc:
        raise VerbsError(f"rail {topology.rail} (rank {topology.rank} on {topology.node}) "
                         f"has no RDMA device: {exc}") from exc
    on_host = sum(r.host == topology.me.host for r in topology.ranks)
    use(pick_device(names, topology, profile.get("topology.nic_rails")), settings,
        oversubscribed=on_host > len(os.sched_getaffinity(0)))


def use(device: str, settings: Settings, oversubscribed: bool = False) -> None:
    """Measure through `device` with `settings` (configure() picks both from the topology and profile)."""
    global _config
    _config = Config(device, settings, oversubscribed)


def _relax() -> Callable[[], None] | None:
    """What a polling loop does after an empty poll: nothing, or yield the CPU when oversubscribed."""
    return os.sched_yield if _config is not None and _config.oversubscribed else None


def used_device() -> str | None:
    """The RDMA device this rank measures through, once configured."""
    return _config.device if _config is not None else None


def configured() -> Config:
    if _config is None:
        raise VerbsError("the verbs engine is not configured: configure(topology, profile) must run first")
    return _config


def _open_context(name: str):
    if IMPORT_ERROR is not None:
        raise VerbsError(f"pyverbs not importable: {IMPORT_ERROR}")
    try:
        return Context(name=name)
    except PyverbsError as exc:
        raise VerbsError(f"cannot open RDMA device {name}: {exc}") from exc


# ---- memory registration ------------------------------------------------------------

MEMLOCK_ERRNOS = (errno.ENOMEM, errno.EPERM, errno.EAGAIN)


def memlock_limit() -> int:
    """The soft RLIMIT_MEMLOCK in bytes (resource.RLIM_INFINITY when unlimited)."""
    return resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]


def memlock_explanation(error, limit: int) -> str:
    """Why a registration failed with ENOMEM/EPERM, in terms of the locked-memory limit."""
    if limit == resource.RLIM_INFINITY or limit < 0:
        return (f"memory registration failed ({error}); the locked-memory limit (ulimit -l) is already "
                "unlimited, so the pinning failed for another reason: the host is out of memory, or the "
                "device's own limit on registered memory was reached (check dmesg)")
    return (f"memory registration failed ({error}): RDMA registration pins memory, and the locked-memory "
            f"limit (ulimit -l) is currently {limit} bytes ({limit // 1024} KiB as ulimit -l prints it); "
            "set it to unlimited: `ulimit -l unlimited`, '* - memlock unlimited' in "
            "/etc/security/limits.conf, LimitMEMLOCK=infinity for slurmd (systemd) and "
            "PropagateResourceLimits so jobs inherit it")


def _register(pd, buf: np.ndarray, access: int):
    """MR over a numpy buffer (kept alive by the caller); VerbsError explaining memlock when pinning fails."""
    try:
        return MR(pd, buf.nbytes, access, address=buf.ctypes.data)
    except PyverbsRDMAError as exc:
        if exc.error_code in MEMLOCK_ERRNOS:
            raise VerbsError(memlock_explanation(exc, memlock_limit())) from exc
        raise VerbsError(f"registering {buf.nbytes} B failed: {exc}") from exc


def _check_keys(mr, nbytes: int, remote: bool = True) -> None:
    """A zero key cannot be used; the rkey only matters for an MR a peer accesses (rxe gives an MR
    registered for local access rkey 0, mlx5 a non-zero one)."""
    if not mr.lkey or (remote and not mr.rkey):
        raise VerbsError(f"registration of {nbytes} B returned lkey {mr.lkey:#x}, rkey {mr.rkey:#x}: "
                         f"a zero {'rkey' if mr.lkey else 'lkey'} cannot be used")


REG_ACCESS_NAMES = ("IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ")


def access_flags(*names: str) -> int:
    flags = 0
    for name in names:
        flags |= getattr(e.ibv_access_flags, name)
    return int(flags)


def fresh_pages(nbytes: int) -> np.ndarray:
    """A uint8 array over a new anonymous mapping: page-aligned, and no page touched yet, so that
    registering it faults in and pins every page (malloc would hand back warm memory). The
    mapping goes away with the last reference to the array."""
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), dtype=np.uint8, count=nbytes)


@contextlib.contextmanager
def _gc_off():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def register_times(nbytes: int, repeats: int, how: str) -> tuple[np.ndarray, np.ndarray]:
    """(ibv_reg_mr ns, ibv_dereg_mr ns) for `repeats` registrations of nbytes on this rank's device.

    how = "allocate": a fresh anonymous mapping each repeat, so registration faults in and
    pins untouched pages (first touch); how = "create": one warm buffer registered again.
    """
    if how not in ("allocate", "create"):
        raise ValueError(f"how must be 'allocate' or 'create', got {how!r}")
    config = configured()
    reg = np.empty(repeats, dtype=np.int64)
    dereg = np.empty(repeats, dtype=np.int64)
    access = access_flags(*REG_ACCESS_NAMES)
    warm = None
    if how == "create":
        warm = allocate(nbytes)
        warm[:] = 0  # touched: only the registration is timed
    now = time.perf_counter_ns
    with _open_context(config.device) as ctx, PD(ctx) as pd, _gc_off():
        for i in range(repeats):
            buf = fresh_pages(nbytes) if warm is None else warm
            t0 = now()
            mr = _register(pd, buf, access)
            t1 = now()
            try:
                _check_keys(mr, nbytes)
            finally:
                t2 = now()
                mr.close()
                t3 = now()
            reg[i], dereg[i] = t1 - t0, t3 - t2
            del buf  # unmaps a fresh mapping
    return reg, dereg


def memlock_effect(nbytes: int) -> tuple[bool, str]:
    """What a locked-memory limit below nbytes does to registering nbytes: (enforced, what happened).

    The soft RLIMIT_MEMLOCK is lowered to half of nbytes for one registration and restored.
    Enforced: the registration failed with the memlock explanation an operator would see.
    Not enforced: it succeeded anyway, which happens for processes with CAP_IPC_LOCK
    (root) or with a driver that does not charge pinned pages to the limit.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    low = max(nbytes // 2, 4096)
    if hard != resource.RLIM_INFINITY:
        low = min(low, hard)
    buf = fresh_pages(nbytes)
    with _open_context(configured().device) as ctx, PD(ctx) as pd:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (low, hard))
        try:
            mr = _register(pd, buf, access_flags(*REG_ACCESS_NAMES))
        except VerbsError as e:
            return True, str(e)
        finally:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))
        mr.close()
    return False, (f"registering {nbytes} B with ulimit -l at {low} B succeeded: this process is not held "
                   "to the limit (CAP_IPC_LOCK, e.g. root); job steps of ordinary users are")


def registration_growth(nbytes: int, cycles: int) -> int:
    """Resident memory growth over `cycles` map + register + deregister + unmap cycles: a leak check.

    One cycle first, so the library's one-time setup is not counted.
    """
    config = configured()
    access = access_flags(*REG_ACCESS_NAMES)
    with _open_context(config.device) as ctx, PD(ctx) as pd:
        def cycle():
            buf = fresh_pages(nbytes)
            _register(pd, buf, access).close()

        cycle()
        gc.collect()
        before = resident_bytes()
        for _ in range(cycles):
            cycle()
        gc.collect()
        return resident_bytes() - before


# ---- GIDs, MTU, attributes ------------------------------------------------------------


@dataclass(frozen=True)
class GidRow:
    """One GID table entry: index, 'xxxx:...:xxxx', and its sysfs type (0 IB/RoCE v1, 1 RoCE v2)."""

    index: int
    gid: str
    gid_type: int | None = None


def gid_is_zero(gid: str) -> bool:
    return int(gid.replace(":", "") or "0", 16) == 0


def choose_gid_index(rows: Iterable[GidRow]) -> int:
    """The RoCE GID index to use: non-zero GIDs only; RoCE v2 first, then IPv4-mapped, then a non-zero index.

    Empty table slots read back as all-zero GIDs (ibv_query_gid does not fail on them).
    """
    usable = [r for r in rows if not gid_is_zero(r.gid)]
    if not usable:
        raise VerbsError("no usable GID: every GID table entry of the port is zero "
                         "(no IP address on the RoCE netdev? check show_gids / ibv_devinfo -v)")

    def rank(r: GidRow):
        return (r.gid_type != GID_TYPE_ROCE_V2, not r.gid.lower().startswith(IPV4_MAPPED), r.index == 0, r.index)

    return min(usable, key=rank).index


def read_gid_rows(ctx, port: int, count: int) -> list[GidRow]:
    rows = []
    for i in range(count):
        try:
            gid = str(ctx.query_gid(port, i))
        except PyverbsError:
            continue
        try:
            gid_type = int(ctx.query_gid_type(port, i))
        except PyverbsError:
            gid_type = None
        rows.append(GidRow(i, gid, gid_type))
    return rows


def path_mtu(a: int, b: int):
    """The path MTU of a connection: the smaller active MTU (ibv_mtu values) of its two ports."""
    return e.ibv_mtu(min(int(a), int(b)))


@dataclass(frozen=True)
class Endpoint:
    """What one side of a pair tells the other (pickled through comm.allgather)."""

    qp_num: int
    psn: int                 # 24-bit start PSN of this side's send queue
    lid: int
    gid: str
    gid_index: int
    mtu: int                 # ibv_mtu of the port's active MTU
    link_layer: int
    rkey: int                # the exposed buffer (remote WRITE target, READ source)
    addr: int
    length: int
    atomic_rkey: int         # the 8-byte fetch-and-add counter
    atomic_addr: int
    max_rd_atomic: int       # outstanding READs/atomics this device can handle
    atomics: bool = True
    device: str = ""
    host: str = ""


def qp_init_attr(send_cq=None, recv_cq=None, tx_depth: int = 128, rx_depth: int = RX_DEPTH,
                 max_inline: int = 0):
    """An RC QP's creation attributes: no sq_sig_all (selective signaling), one SGE per WR."""
    cap = QPCap(max_send_wr=tx_depth, max_recv_wr=rx_depth, max_send_sge=1, max_recv_sge=1,
                max_inline_data=max_inline)
    return QPInitAttr(qp_type=e.ibv_qp_type.IBV_QPT_RC, scq=send_cq, rcq=recv_cq, cap=cap, sq_sig_all=0)


def ah_attr(local: Endpoint, remote: Endpoint, settings: Settings):
    """The address vector to the peer: a GRH (dgid, sgid index, hop limit, traffic class) on RoCE, the LID on IB."""
    if local.link_layer == e.IBV_LINK_LAYER_ETHERNET:
        gr = GlobalRoute(dgid=GID(remote.gid), sgid_index=local.gid_index, hop_limit=settings.hop_limit,
                         traffic_class=settings.traffic_class)
        return AHAttr(dlid=remote.lid, sl=settings.service_level, port_num=settings.port, is_global=1, gr=gr)
    return AHAttr(dlid=remote.lid, sl=settings.service_level, port_num=settings.port, is_global=0)


QP_ACCESS_NAMES = ("IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ",
                   "IBV_ACCESS_REMOTE_ATOMIC")
INIT_MASK_NAMES = ("IBV_QP_STATE", "IBV_QP_PKEY_INDEX", "IBV_QP_PORT", "IBV_QP_ACCESS_FLAGS")
RTR_MASK_NAMES = ("IBV_QP_STATE", "IBV_QP_AV", "IBV_QP_PATH_MTU", "IBV_QP_DEST_QPN", "IBV_QP_RQ_PSN",
                  "IBV_QP_MAX_DEST_RD_ATOMIC", "IBV_QP_MIN_RNR_TIMER")
RTS_MASK_NAMES = ("IBV_QP_STATE", "IBV_QP_TIMEOUT", "IBV_QP_RETRY_CNT", "IBV_QP_RNR_RETRY", "IBV_QP_SQ_PSN",
                  "IBV_QP_MAX_QP_RD_ATOMIC")


def attr_mask(*names: str) -> int:
    mask = 0
    for name in names:
        mask |= getattr(e.ibv_qp_attr_mask, name)
    return int(mask)


def transition_attrs(local: Endpoint, remote: Endpoint, settings: Settings) -> list[tuple[str, object, int]]:
    """(state, QPAttr, attribute mask) for RESET->INIT, INIT->RTR, RTR->RTS of an RC QP, as perftest sets them."""
    states = e.ibv_qp_state
    out_reads = max(1, min(local.max_rd_atomic, remote.max_rd_atomic))

    init = QPAttr(qp_state=states.IBV_QPS_INIT, cur_qp_state=states.IBV_QPS_RESET, port_num=settings.port)
    init.pkey_index = 0
    init.qp_access_flags = access_flags(*QP_ACCESS_NAMES)

    rtr = QPAttr(qp_state=states.IBV_QPS_RTR, cur_qp_state=states.IBV_QPS_INIT, port_num=settings.port,
                 path_mtu=path_mtu(local.mtu, remote.mtu))
    rtr.dest_qp_num = remote.qp_num
    rtr.rq_psn = remote.psn          # perftest: rq_psn = dest->psn
    rtr.max_dest_rd_atomic = out_reads
    rtr.min_rnr_timer = MIN_RNR_TIMER
    rtr.ah_attr = ah_attr(local, remote, settings)

    rts = QPAttr(qp_state=states.IBV_QPS_RTS, cur_qp_state=states.IBV_QPS_RTR, port_num=settings.port)
    rts.timeout = settings.timeout
    rts.retry_cnt = settings.retry_count
    rts.rnr_retry = settings.rnr_retry
    rts.sq_psn = local.psn           # perftest: sq_psn = my_dest->psn
    rts.max_rd_atomic = out_reads
    return [("INIT", init, attr_mask(*INIT_MASK_NAMES)),
            ("RTR", rtr, attr_mask(*RTR_MASK_NAMES)),
            ("RTS", rts, attr_mask(*RTS_MASK_NAMES))]


# ---- work requests --------------------------------------------------------------------


def sge(addr: int, length: int, lkey: int):
    return SGE(addr, length, lkey)


def send_flags(signaled: bool, inline: bool = False) -> int:
    flags = 0
    if signaled:
        flags |= e.ibv_send_flags.IBV_SEND_SIGNALED
    if inline:
        flags |= e.ibv_send_flags.IBV_SEND_INLINE
    return int(flags)


def _send(opcode_name: str, wr_id: int, sg, flags: int, imm_data: int = 0):
    return SendWR(wr_id=wr_id, opcode=getattr(e.ibv_wr_opcode, opcode_name), num_sge=1, sg=[sg],
                  send_flags=flags, imm_data=imm_data)


def write_wr(wr_id: int, sg, rkey: int, remote_addr: int, signaled: bool = True, inline: bool = False):
    """RDMA WRITE of the SGE to (remote_addr, rkey)."""
    wr = _send("IBV_WR_RDMA_WRITE", wr_id, sg, send_flags(signaled, inline))
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def write_imm_wr(wr_id: int, sg, rkey: int, remote_addr: int, imm: int, signaled: bool = True,
                 inline: bool = False):
    """RDMA WRITE_WITH_IMM: the immediate (host order here) goes on the wire in network order."""
    wr = _send("IBV_WR_RDMA_WRITE_WITH_IMM", wr_id, sg, send_flags(signaled, inline), socket.htonl(imm))
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def read_wr(wr_id: int, sg, rkey: int, remote_addr: int, signaled: bool = True):
    """RDMA READ of (remote_addr, rkey) into the SGE (whose MR needs LOCAL_WRITE)."""
    wr = _send("IBV_WR_RDMA_READ", wr_id, sg, send_flags(signaled))
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def atomic_faa_wr(wr_id: int, sg, rkey: int, remote_addr: int, add: int = 1, signaled: bool = True):
    """ATOMIC_FETCH_AND_ADD of `add` (the compare_add operand) on the remote 8 bytes; the old value lands in sg."""
    wr = _send("IBV_WR_ATOMIC_FETCH_AND_ADD", wr_id, sg, send_flags(signaled))
    wr.set_wr_atomic(rkey, remote_addr, add, 0)
    return wr


def send_wr(wr_id: int, sg, signaled: bool = True, inline: bool = False):
    return _send("IBV_WR_SEND", wr_id, sg, send_flags(signaled, inline))


def recv_wr(wr_id: int, sg):
    return RecvWR(wr_id=wr_id, num_sge=1, sg=[sg])


# ---- completions --------------------------------------------------------------------------

CAUSES = {
    "IBV_WC_RETRY_EXC_ERR": "transport retries exhausted: the peer did not ACK (wrong path, GID index, MTU "
                            "or a dead link; check ibv_devinfo, show_gids, the peer's port state)",
    "IBV_WC_REM_ACCESS_ERR": "remote access error: wrong rkey or the peer's MR lacks REMOTE_WRITE/READ/ATOMIC",
    "IBV_WC_RNR_RETRY_EXC_ERR": "receiver not ready: the peer had no receive posted for a SEND or "
                                "WRITE_WITH_IMM and the RNR retries ran out",
    "IBV_WC_LOC_PROT_ERR": "local protection error: the SGE's lkey does not cover its buffer (deregistered "
                           "MR, wrong lkey, or an address outside the MR)",
    "IBV_WC_LOC_LEN_ERR": "local length error: the message is longer than the receive buffer or the "
                          "port's maximum message size",
    "IBV_WC_WR_FLUSH_ERR": "flushed: the QP was already in the error state after an earlier failed work "
                           "request; the first error is the one to look at",
    "IBV_WC_REM_INV_REQ_ERR": "remote invalid request: the peer rejected the request (longer than its "
                              "receive buffer, an operation its QP does not allow, or a bad opcode)",
    "IBV_WC_REM_OP_ERR": "remote operation error: the peer could not complete the operation (e.g. an "
                         "invalid receive queue entry on its side)",
    "IBV_WC_LOC_QP_OP_ERR": "local QP operation error: the work request does not fit this QP (too many "
                            "SGEs, inline data over max_inline_data, or the QP not in RTS)",
}


def describe_completion(status: int, wr_id: int, vendor_err: int = 0, what: str | None = None) -> str:
    name = enum_name("ibv_wc_status", status)
    cause = CAUSES.get(name, f"the work request completed with {name}")
    vendor = f", vendor error {vendor_err:#x}" if vendor_err else ""
    subject = f"{what} work request" if what else "work request"
    return f"{subject} {wr_id} failed with {name} ({int(status)}{vendor}): {cause}"


def check_completion(wc, what: str | None = None) -> None:
    """Raise CompletionError with a readable cause unless the completion succeeded."""
    if wc.status != e.ibv_wc_status.IBV_WC_SUCCESS:
        raise CompletionError(wc, what)


# ---- windowed posting ------------------------------------------------------------------------


class Window:
    """perftest's run_iter_bw credit accounting for `total` WRs on one send queue.

    At most `depth` (tx_depth) WRs are outstanding; every cq_mod-th WR and the last one are
    signaled, and a completion of WR i returns the credits of every WR up to i (an RC queue
    completes in order, and unsignaled WRs hold their send queue slots until a later signaled
    one completes). cq_mod is capped at depth, as perftest does, or the queue would fill with
    unsignaled WRs and never complete.
    """

    def __init__(self, total: int, depth: int, cq_mod: int):
        if total < 1 or depth < 1 or cq_mod < 1:
            raise ValueError(f"total, depth and cq_mod must be >= 1, got {total}, {depth}, {cq_mod}")
        self.total, self.depth, self.cq_mod = total, depth, min(cq_mod, depth)
        self.reset()

    def reset(self) -> None:
        self.posted = 0
        self.completed = 0

    def signaled(self, index: int) -> bool:
        return (index + 1) % self.cq_mod == 0 or index == self.total - 1

    @property
    def in_flight(self) -> int:
        return self.posted - self.completed

    def can_post(self) -> bool:
        return self.posted < self.total and self.posted - self.completed < self.depth

    def next(self) -> tuple[int, bool]:
        """(index, signaled) of the next WR to post."""
        if not self.can_post():
            raise VerbsError(f"no credit to post: {self.in_flight} in flight of depth {self.depth}")
        index = self.posted
        self.posted += 1
        return index, self.signaled(index)

    def complete(self, wr_id: int) -> int:
        """A signaled WR completed; returns the credits it gave back."""
        index = int(wr_id)
        if not self.completed <= index < self.posted or not self.signaled(index):
            raise VerbsError(f"unexpected completion of work request {index} "
                             f"({self.completed} completed, {self.posted} posted)")
        credits = index + 1 - self.completed
        self.completed = index + 1
        return credits

    @property
    def done(self) -> bool:
        return self.completed == self.total

    def run(self, post: Callable[[int, bool], None], poll: Callable[[], Iterable[int]],
            timeout_s: float = SPIN_TIMEOUT_S) -> None:
        """Post all `total` WRs with post(index, signaled) and wait until every one completed.

        poll() returns the wr_ids of the signaled completions it found (possibly none),
        having checked their status.
        """
        self.reset()
        spins, deadline, relax = 0, None, _relax()
        while self.completed < self.total:
            while self.can_post():
                post(*self.next())
            found = False
            for wr_id in poll():
                self.complete(wr_id)
                found = True
            if found:
                spins, deadline = 0, None
            else:
                spins += 1
                if relax:
                    relax()
                if not spins & 0xFFFF:
                    deadline = _check_deadline(deadline, timeout_s, lambda: (
                        f"{self.in_flight} work requests got no completion in {timeout_s:g} s "
                        f"({self.completed} of {self.total} completed)"))


def _check_deadline(deadline: float | None, timeout_s: float, what: Callable[[], str]) -> float:
    now = time.monotonic()
    if deadline is None:
        return now + timeout_s
    if now > deadline:
        raise VerbsError(what())
    return deadline


def wait_completion(cq, what: str | None = None, timeout_s: float = SPIN_TIMEOUT_S):
    """Spin until `cq` yields one completion, check it and return it."""
    poll = cq.poll
    spins, deadline, relax = 0, None, _relax()
    while True:
        n, wcs = poll(1)
        if n:
            wc = wcs[0]
            check_completion(wc, what)
            return wc
        spins += 1
        if relax:
            relax()
        if not spins & 0xFFFF:
            deadline = _check_deadline(deadline, timeout_s, lambda: (
                f"no completion for the {what or 'posted'} work request in {timeout_s:g} s"))


def spin_until(mem: memoryview, index: int, value: int, timeout_s: float = SPIN_TIMEOUT_S) -> None:
    """Spin until byte `index` of mem equals `value` (the peer's RDMA WRITE arrived)."""
    spins, deadline, relax = 0, None, _relax()
    while mem[index] != value:
        spins += 1
        if relax:
            relax()
        if not spins & 0xFFFF:
            deadline = _check_deadline(deadline, timeout_s, lambda: (
                f"no RDMA WRITE from the peer in {timeout_s:g} s: the last byte of the receive buffer "
                f"stayed {mem[index]}, expected {value}"))


# ---- point to point -------------------------------------------------------------------------------


def register_gpu(pd, gpu: gpumem.GpuBuffer, flags: int, device: str):
    """(MR, dma-buf fd or None, IOVA, path) for GPU memory: dma-buf first, whose IOVA is the
    dma-buf offset (0); else the CUDA pointer by address, which needs nvidia_peermem.
    The caller closes the fd after the MR."""
    try:
        fd = gpumem.export_dmabuf(gpu)
    except gpumem.GpuMemError as exc:
        dmabuf_error = exc
    else:
        try:
            return DmaBufMR(pd, gpu.size, flags, dmabuf=fd, offset=0), fd, 0, "dma-buf"
        except PyverbsRDMAError as exc:
            os.close(fd)
            dmabuf_error = exc
    try:
        return MR(pd, gpu.size, flags, address=gpu.ptr), None, gpu.ptr, "nvidia_peermem"
    except PyverbsRDMAError as exc:
        raise VerbsError(f"GPU memory cannot be registered on {device}: dma-buf: {dmabuf_error}; "
                         f"by address (needs nvidia_peermem): {exc}") from exc


def gpu_register_times(nbytes: int, repeats: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(registration ns, deregistration ns, path) of GPU memory on this rank's device and current GPU.

    Registration includes the dma-buf export, as a GPUDirect user pays both.
    """
    config = configured()
    gpu = gpumem.device_buffer(nbytes)
    reg = np.empty(repeats, dtype=np.int64)
    dereg = np.empty(repeats, dtype=np.int64)
    flags = access_flags(*REG_ACCESS_NAMES)
    path = ""
    now = time.perf_counter_ns
    with _open_context(config.device) as ctx, PD(ctx) as pd, _gc_off():
        for i in range(repeats):
            t0 = now()
            mr, fd, _, path = register_gpu(pd, gpu, flags, config.device)
            t1 = now()
            try:
                _check_keys(mr, gpu.size)
            finally:
                t2 = now()
                mr.close()
                if fd is not None:
                    os.close(fd)
                t3 = now()
            reg[i], dereg[i] = t1 - t0, t3 - t2
    return reg, dereg, path


def _device_ptr(buf) -> int | None:
    """The CUDA pointer of a cupy array (None for host memory)."""
    data = getattr(buf, "data", None)
    return getattr(data, "ptr", None)


class PairLink:
    """Two ranks (a pair communicator of size 2), each with an RC QP connected to the other.

    Both ranks call every method (collective over the pair); `origin` names the pair rank
    (0 or 1) that drives, and results are returned there (None elsewhere). A failure on one
    side is reported on both: each step ends with an exchange in which the failing rank
    re-raises its error (noting the peer's when both failed) and the other raises VerbsError
    naming it, so neither hangs in a collective the other left.
    """

    def __init__(self, comm, max_size: int, slot_bytes: int = 0, memory: str = "host"):
        """slot_bytes: buffer memory for the distinct slots of windowed writes and reads, and of the
        fetched values of atomics (at least max_size)."""
        if comm.Get_size() != 2:
            raise ValueError(f"a PairLink needs a communicator of 2 ranks, got {comm.Get_size()}")
        if memory not in ("host", "cuda"):
            raise ValueError(f"memory must be 'host' or 'cuda', got {memory!r}")
        self.memory = memory  # cuda: the written and read buffers are GPU memory (GPUDirect RDMA)
        self._gpu: list = []  # gpumem.GpuBuffer of cuda buffers, kept alive with the link
        self._iova: dict[int, int] = {}  # id(buffer) -> the address its MR knows it by
        self._fds: list[int] = []  # dma-buf fds, closed after their MRs
        self.gpu_path = None  # "dma-buf" or "nvidia_peermem"
        self.comm = comm
        self.me = comm.Get_rank()
        self.peer = 1 - self.me
        self.max_size = max(int(max_size), int(slot_bytes), 1)
        self.ctx = self.pd = self.scq = self.rcq = self.qp = None
        self._mrs: list = []
        self._keep: list = []  # WRs and SGEs that live as long as the link; closed once in free()
        self._closed = False
        self.max_inline = 0
        try:
            local, error = None, None
            try:
                config = configured()
                self.device, self.settings = config.device, config.settings
                local = self._open()
            except Exception as exc:  # noqa: BLE001 - re-raised once the peer has heard of it
                error = exc
            gathered = self._agree(error, local)
            self.local, self.remote = gathered[self.me], gathered[self.peer]
            with self._step():
                self._connect()
        except BaseException:
            self.free()
            raise

    # -- setup

    def _open(self) -> Endpoint:
        """Open this rank's device, port, PD, CQs, QP and MRs; return what the peer needs to know."""
        s = self.settings
        self.ctx = _open_context(self.device)
        dev_attr = self.ctx.query_device()
        port = self.ctx.query_port(s.port)
        if port.state != e.ibv_port_state.IBV_PORT_ACTIVE:
            raise VerbsError(f"{self.device} port {s.port} is {port_state_name(port.state)}, not ACTIVE "
                             f"(ibv_devinfo -d {self.device}: a cable, switch or subnet manager problem)")
        if port.link_layer == e.IBV_LINK_LAYER_ETHERNET:
            gid_index = s.gid_index if s.gid_index >= 0 else choose_gid_index(
                read_gid_rows(self.ctx, s.port, port.gid_tbl_len))
        else:
            gid_index = max(s.gid_index, 0)
        gid = str(self.ctx.query_gid(s.port, gid_index))
        if port.link_layer == e.IBV_LINK_LAYER_ETHERNET and gid_is_zero(gid):
            raise VerbsError(f"{self.device} port {s.port}: GID index {gid_index} is empty "
                             "([verbs] gid_index; show_gids lists the populated ones)")
        self.pd = PD(self.ctx)
        self.scq = CQ(self.ctx, s.tx_depth + 1)
        self.rcq = CQ(self.ctx, RX_DEPTH + 1)
        try:
            self.qp = QP(self.pd, qp_init_attr(self.scq, self.rcq, s.tx_depth, RX_DEPTH, INLINE_WRITE))
            self.max_inline = INLINE_WRITE
        except PyverbsError:  # a device without inline sends: no inline then
            try:
                self.qp = QP(self.pd, qp_init_attr(self.scq, self.rcq, s.tx_depth, RX_DEPTH, 0))
            except PyverbsError as exc:
                raise VerbsError(f"creating an RC QP on {self.device} failed: {exc} ([verbs] tx_depth "
                                 f"{s.tx_depth}; the device allows {dev_attr.max_qp_wr} WRs per queue)") from exc
            self.max_inline = 0
        # `local_buf`: what this side writes from and reads into. `window`: what the peer writes
        # into and reads from, where SENDs land too. `counter`: the peer's fetch-and-add target,
        # whose old values land in the peer's `fetched`.
        if self.memory == "cuda":
            self._gpu = [gpumem.device_buffer(self.max_size) for _ in range(2)]
            self.local_buf, self.window = (b.view(self.max_size) for b in self._gpu)
        else:
            self.local_buf = allocate(self.max_size)
            self.window = allocate(self.max_size)
        self.counter = allocate(8)
        self.fetched = allocate(8 * min(MAX_SLOTS, max(1, self.max_size // 8)))
        for buf in (self.local_buf, self.window, self.counter, self.fetched):
            buf[:] = 0
        self.local_mr = self._mr(self.local_buf, "IBV_ACCESS_LOCAL_WRITE")
        self.window_mr = self._mr(self.window, "IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE",
                                  "IBV_ACCESS_REMOTE_READ")
        self.counter_mr = self._mr(self.counter, "IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_ATOMIC")
        self.fetched_mr = self._mr(self.fetched, "IBV_ACCESS_LOCAL_WRITE")
        recv_sge = self._kept(sge(self._addr(self.window), self.max_size, self.window_mr.lkey))
        self._recv = self._kept(recv_wr(0, recv_sge))
        atomics = dev_attr.atomic_caps != e.ibv_atomic_cap.IBV_ATOMIC_NONE
        reads = min(dev_attr.max_qp_rd_atom, dev_attr.max_qp_init_rd_atom)
        return Endpoint(qp_num=self.qp.qp_num, psn=random.getrandbits(24), lid=port.lid, gid=gid,
                        gid_index=gid_index, mtu=int(port.active_mtu), link_layer=int(port.link_layer),
                        rkey=self.window_mr.rkey, addr=self._addr(self.window), length=self.max_size,
                        atomic_rkey=self.counter_mr.rkey, atomic_addr=self.counter.ctypes.data,
                        max_rd_atomic=max(1, int(reads)), atomics=bool(atomics), device=self.device,
                        host=socket.gethostname())

    def _connect(self) -> None:
        """RESET -> INIT -> RTR -> RTS towards the peer, then the receives SEND / WRITE_WITH_IMM need."""
        if self.local.link_layer != self.remote.link_layer:
            raise VerbsError(f"{self.device} is {link_layer_name(self.local.link_layer)} but the peer's "
                             f"{self.remote.device} on {self.remote.host} is "
                             f"{link_layer_name(self.remote.link_layer)}: they cannot be connected")
        for state, attr, mask in transition_attrs(self.local, self.remote, self.settings):
            try:
                self.qp.modify(attr, mask)
            except PyverbsError as exc:
                mtu = mtu_bytes(path_mtu(self.local.mtu, self.remote.mtu))
                raise VerbsError(f"{self.device} port {self.settings.port}: moving the QP to {state} failed: "
                                 f"{exc} (peer {self.remote.device} on {self.remote.host}, GID index "
                                 f"{self.local.gid_index}, path MTU {mtu} B)") from exc
        for _ in range(RX_DEPTH):
            self.qp.post_recv(self._recv)

    def _mr(self, buf, *access: str):
        gpu = next((g for g in self._gpu if g.ptr == _device_ptr(buf)), None)
        mr = _register(self.pd, buf, access_flags(*access)) if gpu is None else self._gpu_mr(buf, gpu, *access)
        self._mrs.append(mr)
        _check_keys(mr, buf.nbytes, remote=any(a.startswith("IBV_ACCESS_REMOTE_") for a in access))
        return mr

    def _gpu_mr(self, buf, gpu: gpumem.GpuBuffer, *access: str):
        mr, fd, iova, self.gpu_path = register_gpu(self.pd, gpu, access_flags(*access), self.device)
        if fd is not None:
            self._fds.append(fd)
        self._iova[id(buf)] = iova
        return mr

    def _addr(self, buf) -> int:
        """The address a work request names `buf` by: its MR's IOVA for GPU memory, else its host address."""
        return self._iova[id(buf)] if id(buf) in self._iova else buf.ctypes.data

    def _kept(self, obj):
        self._keep.append(obj)
        return obj

    def _agree(self, error: BaseException | None, payload=None) -> list:
        """Collective: exchange (error, payload); re-raise our error, or raise VerbsError for the peer's."""
        text = None if error is None else f"{type(error).__name__}: {error}"
        gathered = self.comm.allgather((text, payload))
        peer_text = gathered[self.peer][0]
        if error is not None:
            if peer_text and hasattr(error, "add_note"):  # both failed: the peer's may be the cause
                error.add_note(f"the peer (pair rank {self.peer}) failed too: {peer_text}")
            raise error
        if peer_text:
            raise VerbsError(f"the peer (pair rank {self.peer}) failed: {peer_text}")
        return [p for _, p in gathered]

    @contextlib.contextmanager
    def _step(self):
        """Run a block on this rank, then agree with the peer (a barrier): both raise if either failed."""
        error = None
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - re-raised once the peer has heard of it
            error = exc
        self._agree(error)

    def free(self) -> None:
        """Destroy the QP, MRs, CQs, PD and context, in that order; the buffers go with the link."""
        if self._closed:
            return
        self._closed = True
        for obj in (self.qp, *self._mrs, self.scq, self.rcq, self.pd, self.ctx):
            if obj is not None:
                obj.close()
        for fd in self._fds:  # pyverbs does not close an external dma-buf fd
            os.close(fd)
        self._fds.clear()
        for obj in reversed(self._keep):  # pyverbs 44 frees a WR's SGE copy only in close(): once
            obj.close()
        self._keep.clear()
        self._mrs.clear()
        self.qp = self.scq = self.rcq = self.pd = self.ctx = None

    # -- helpers

    def _check(self, size: int, origin: int) -> None:
        if origin not in (0, 1):
            raise ValueError(f"origin must be pair rank 0 or 1, got {origin}")
        limit = min(self.max_size, self.remote.length)
        if not 1 <= size <= limit:
            raise ValueError(f"size {size} B outside 1..{limit} B (the link's max_size)")

    def _inline(self, size: int) -> bool:
        return size <= self.max_inline

    def _sge(self, stack: contextlib.ExitStack, buf: np.ndarray, size: int, mr):
        return stack.enter_context(sge(self._addr(buf), size, mr.lkey))

    def _windowed(self, wr_sig, wr_unsig, window: int, what: str) -> Callable[[], None]:
        """An op that posts `window` WRs with tx_depth / cq_mod credit accounting and waits for all."""
        win = Window(window, self.settings.tx_depth, self.settings.cq_mod)
        post_send, cq_poll = self.qp.post_send, self.scq.poll

        def post(index: int, signaled: bool) -> None:
            wr = wr_sig if signaled else wr_unsig
            wr.wr_id = index
            post_send(wr)

        def poll() -> list[int]:
            _, wcs = cq_poll(POLL_BATCH)
            for wc in wcs:
                check_completion(wc, what)
            return [wc.wr_id for wc in wcs]

        return lambda: win.run(post, poll)

    @staticmethod
    def _timed(op, iters: int, warmup: int, budget_s: float | None) -> np.ndarray:
        if budget_s is None:
            return timed(op, iters, warmup)
        return timed_capped(op, iters, warmup, int(budget_s * 1e9), min_iters=2)

    def _pingpong(self, origin: int, iters: int, warmup: int, origin_op, target_op, halve: bool):
        """origin_op timed at the origin, target_op run as often at the target. Collective."""
        times = None
        with self._step():
            if self.me == origin:
                times = timed(origin_op, iters, warmup)
                if halve:
                    times //= 2
            elif target_op is not None:
                with _gc_off():
                    for _ in range(warmup + iters):
                        target_op()
        return times

    # -- bandwidth

    def _slot_wrs(self, stack: contextlib.ExitStack, make, slots: Slots, local, remote_addr: int,
                  local_mr) -> list[tuple]:
        """(signaled, unsignaled) WR pairs, one per slot of a batch: slot k moves local[k] <-> remote k."""
        out = []
        for k in range(slots.per_iter * slots.iters_per_batch):
            off = k * slots.size
            sg = stack.enter_context(sge(self._addr(local) + off, slots.size, local_mr.lkey))
            out.append((stack.enter_context(make(sg, remote_addr + off, True)),
                        stack.enter_context(make(sg, remote_addr + off, False))))
        return out

    def _slot_op_at(self, wrs: list[tuple], slots: Slots, window: int, what: str):
        """op_at(t) for drivers.verify.batched: iteration t posts `window` WRs to its slots."""
        win = Window(window, self.settings.tx_depth, self.settings.cq_mod)
        post_send, cq_poll = self.qp.post_send, self.scq.poll

        def poll() -> list[int]:
            _, wcs = cq_poll(POLL_BATCH)
            for wc in wcs:
                check_completion(wc, what)
            return [wc.wr_id for wc in wcs]

        def op_at(t: int):
            mine = [wrs[t * slots.per_iter + j % slots.per_iter] for j in range(window)]

            def post(index: int, signaled: bool) -> None:
                wr = mine[index][0 if signaled else 1]
                wr.wr_id = index
                post_send(wr)
            return lambda: win.run(post, poll)
        return op_at

    def _capacity(self, size: int) -> int:
        """Buffer bytes for the slots of one batch: both sides' memory, and at most MAX_SLOTS WRs."""
        return min(self.max_size, self.remote.length, MAX_SLOTS * size)

    def put_bandwidth(self, size: int, iters: int, warmup: int, window: int, origin: int,
                      seed: tuple[int, int, int], budget_s: float | None = None,
                      policy: Policy | None = None) -> Transfer:
        """ib_write_bw: each iteration posts `window` RDMA WRITEs (at most tx_depth in flight, one
        completion per cq_mod) and ends when all are acknowledged; every WRITE of a batch goes to
        its own slot, which the target poisons before and checks after (drivers.verify.WriteCheck).

        seed = (source world rank, destination world rank, iteration) of the pattern.
        budget_s caps the timed loop (at least 2 iterations), so a crippled link costs seconds.
        """
        self._check(size, origin)
        slots = Slots.plan(size, window, iters, self._capacity(size))
        check = WriteCheck.planned(self.comm, origin, slots, iters, policy, seed)
        region = slots.bytes
        times = tally = None
        with self._step(), contextlib.ExitStack() as stack:
            if self.me == origin:
                r, inline = self.remote, self._inline(size)
                wrs = self._slot_wrs(stack, lambda sg, addr, sig: write_wr(0, sg, r.rkey, addr, sig, inline),
                                     slots, self.local_buf, r.addr, self.local_mr)
                times = check.origin_loop(
                    self._slot_op_at(wrs, slots, window, "RDMA WRITE"), iters, warmup,
                    fill=lambda b: fill_pattern(self.local_buf[:region], *seed, b),
                    pause=lambda: None, resume=lambda: None,
                    budget_ns=None if budget_s is None else int(budget_s * 1e9), min_iters=2)
            else:
                # Every write of a batch was acknowledged before the origin says it ended.
                tally = check.target_loop(lambda b: poison(self.window[:region], *seed, b),
                                          lambda b, written: slot_tally(self.window[:written * size], size, *seed, b))
        return Transfer(times, tally)

    def read_bandwidth(self, size: int, iters: int, warmup: int, window: int, origin: int,
                       seed: tuple[int, int, int], budget_s: float | None = None,
                       policy: Policy | None = None) -> Transfer:
        """ib_read_bw: the origin READs the target's patterned slots, `window` per iteration, each
        into its own local slot, poisoned before each verified batch and checked after it; times
        and the check are both returned at the origin.
        """
        self._check(size, origin)
        slots = Slots.plan(size, window, iters, self._capacity(size))
        region = slots.bytes
        times = tally = None
        with self._step():  # the pattern is in place before the first READ
            if self.me != origin:
                fill_pattern(self.window[:region], *seed, 0)
        with self._step(), contextlib.ExitStack() as stack:
            if self.me == origin:
                r = self.remote
                wrs = self._slot_wrs(stack, lambda sg, addr, sig: read_wr(0, sg, r.rkey, addr, sig),
                                     slots, self.local_buf, r.addr, self.local_mr)
                tally = Tally()

                def after(batch: int, written: int, last: bool) -> None:
                    tally.merge(slot_tally(self.local_buf[:written * size], size, *seed, 0))

                times = batched(self._slot_op_at(wrs, slots, window, "RDMA READ"), iters, warmup, slots,
                                planned_batches(slots, iters, policy, seed),
                                lambda b: poison(self.local_buf[:region], *seed, 0), after,
                                None if budget_s is None else int(budget_s * 1e9), min_iters=2)
        return Transfer(times, tally)

    # -- latency

    def put_latency(self, size: int, iters: int, warmup: int, origin: int,
                    seed: tuple[int, int, int] | None = None, policy: Policy | None = None) -> Transfer:
        """ib_write_lat: RDMA WRITE ping-pong; each side spins on the last byte of its receive buffer.

        One sample is half a round trip, as perftest reports it (the mpi engine's put latency is
        a full Put + Flush round trip). Each write carries the running count its peer waits for, so
        a write that does not arrive stops the ping-pong (a timeout), never passes: no data tally.
        """
        return Transfer(self._write_pingpong(size, iters, warmup, origin), None)

    def _write_pingpong(self, size: int, iters: int, warmup: int, origin: int) -> np.ndarray | None:
        self._check(size, origin)
        if self.memory == "cuda":
            return self._completion_latency(size, iters, warmup, origin)
        last = size - 1
        with contextlib.ExitStack() as stack:
            with self._step():  # both last bytes are reset before the first write
                self.window[last] = 0
                sg = self._sge(stack, self.local_buf, size, self.local_mr)
                wr = stack.enter_context(write_wr(0, sg, self.remote.rkey, self.remote.addr, True,
                                                  self._inline(size)))
            post, scq = self.qp.post_send, self.scq
            incoming, outgoing = memoryview(self.window), memoryview(self.local_buf)
            count = 0

            def send(value: int) -> None:
                outgoing[last] = value
                post(wr)
                wait_completion(scq, "RDMA WRITE")

            def origin_op() -> None:
                nonlocal count
                count = (count + 1) & 0xFF
                send(count)
                spin_until(incoming, last, count)

            def target_op() -> None:
                nonlocal count
                count = (count + 1) & 0xFF
                spin_until(incoming, last, count)
                send(count)

            return self._pingpong(origin, iters, warmup, origin_op, target_op, halve=True)

    def _completion_latency(self, size: int, iters: int, warmup: int, origin: int) -> np.ndarray | None:
        """GPU memory: the host cannot spin on a byte in device memory, so one sample is a signaled
        RDMA WRITE from post to its completion (the responder's ACK): a full round trip."""
        with contextlib.ExitStack() as stack:
            sg = self._sge(stack, self.local_buf, size, self.local_mr)
            wr = stack.enter_context(write_wr(0, sg, self.remote.rkey, self.remote.addr, True, False))
            post, scq = self.qp.post_send, self.scq

            def origin_op() -> None:
                post(wr)
                wait_completion(scq, "RDMA WRITE")

            return self._pingpong(origin, iters, warmup, origin_op, None, halve=False)

    def pingpong_latency(self, size: int, iters: int, warmup: int, origin: int) -> np.ndarray | None:
        """ib_send_lat: SEND / RECV ping-pong, each side polling its receive CQ; half a round trip."""
        self._check(size, origin)
        with contextlib.ExitStack() as stack:
            sg = self._sge(stack, self.local_buf, size, self.local_mr)
            wr = stack.enter_context(send_wr(0, sg, True, self._inline(size)))
            post, scq, rcq, post_recv, recv = self.qp.post_send, self.scq, self.rcq, self.qp.post_recv, self._recv

            def send() -> None:
                post(wr)
                wait_completion(scq, "SEND")

            def receive() -> None:
                wc = wait_completion(rcq, "receive")
                post_recv(recv)
                if wc.byte_len != size:
                    raise VerbsError(f"received {wc.byte_len} B where the peer sends {size} B")

            def origin_op() -> None:
                send()
                receive()

            def target_op() -> None:
                receive()
                send()

            return self._pingpong(origin, iters, warmup, origin_op, target_op, halve=True)

    def write_imm_latency(self, size: int, iters: int, warmup: int, origin: int) -> np.ndarray | None:
        """ib_write_lat --write_with_imm: RDMA WRITE_WITH_IMM ping-pong; each side polls its receive CQ
        and checks the immediate (a running count). Half a round trip per sample.
        """
        self._check(size, origin)
        with contextlib.ExitStack() as stack:
            sg = self._sge(stack, self.local_buf, size, self.local_mr)
            wr = stack.enter_context(write_imm_wr(0, sg, self.remote.rkey, self.remote.addr, 0, True,
                                                  self._inline(size)))
            post, scq, rcq, post_recv, recv = self.qp.post_send, self.scq, self.rcq, self.qp.post_recv, self._recv
            with_imm = e.ibv_wc_opcode.IBV_WC_RECV_RDMA_WITH_IMM
            count = 0

            def send(value: int) -> None:
                wr.imm_data = socket.htonl(value)
                post(wr)
                wait_completion(scq, "RDMA WRITE_WITH_IMM")

            def receive(value: int) -> None:
                wc = wait_completion(rcq, "receive")
                post_recv(recv)
                if wc.opcode != with_imm or socket.ntohl(wc.imm_data) != value:
                    raise VerbsError(f"expected a WRITE_WITH_IMM carrying {value}, got "
                                     f"{enum_name('ibv_wc_opcode', wc.opcode)} carrying {socket.ntohl(wc.imm_data)}")

            def origin_op() -> None:
                nonlocal count
                count = (count + 1) & 0xFFFFFFFF
                send(count)
                receive(count)

            def target_op() -> None:
                nonlocal count
                count = (count + 1) & 0xFFFFFFFF
                receive(count)
                send(count)

            return self._pingpong(origin, iters, warmup, origin_op, target_op, halve=True)

    def read_latency(self, size: int, iters: int, warmup: int, origin: int,
                     seed: tuple[int, int, int] = (0, 1, 0), policy: Policy | None = None) -> Transfer:
        """ib_read_lat: one RDMA READ posted and polled per sample; a full round trip. Each READ of a
        batch reads its own slot of the target's pattern into its own local slot, poisoned before
        the batch and checked after it (drivers.verify.batched)."""
        self._check(size, origin)
        slots = Slots.plan(size, 1, iters, self._capacity(size))
        region = slots.bytes
        times = tally = None
        with self._step():
            if self.me != origin:
                fill_pattern(self.window[:region], *seed, 0)
        with self._step(), contextlib.ExitStack() as stack:
            if self.me == origin:
                r, post, scq = self.remote, self.qp.post_send, self.scq
                wrs = self._slot_wrs(stack, lambda sg, addr, sig: read_wr(0, sg, r.rkey, addr, sig),
                                     slots, self.local_buf, r.addr, self.local_mr)
                tally = Tally()

                def op_at(t: int):
                    wr = wrs[t][0]

                    def op() -> None:
                        post(wr)
                        wait_completion(scq, "RDMA READ")
                    return op

                def after(batch: int, written: int, last: bool) -> None:
                    tally.merge(slot_tally(self.local_buf[:written * size], size, *seed, 0))

                times = batched(op_at, iters, warmup, slots, planned_batches(slots, iters, policy, seed),
                                lambda b: poison(self.local_buf[:region], *seed, 0), after)
        return Transfer(times, tally)

    def atomic_latency(self, iters: int, warmup: int, origin: int) -> Transfer:
        """ib_atomic_lat: one fetch-and-add of 1 on the target's 8-byte counter per sample (a full
        round trip). Sample t fetches into slot t (of at most MAX_SLOTS, reused in turn), poisoned
        with -1 beforehand, so the origin sees what each add returned (the last add of each slot);
        afterwards the target checks the counter holds warmup + iters.
        """
        self._check(1, origin)
        if not (self.local.atomics and self.remote.atomics):  # both sides know both: both raise
            raise VerbsError(f"atomics unsupported: {self.local.device} atomics={self.local.atomics}, "
                             f"{self.remote.device} atomics={self.remote.atomics} (ibv_devinfo -v: atomic_cap)")
        with self._step():
            if self.me != origin:
                self.counter[:] = 0
        fetched = self.fetched.view(np.int64)
        n = max(1, min(iters, len(fetched)))
        times = tally = None
        with self._step(), contextlib.ExitStack() as stack:
            if self.me == origin:
                r, post, scq = self.remote, self.qp.post_send, self.scq
                wrs = [stack.enter_context(atomic_faa_wr(0, stack.enter_context(
                    sge(self._addr(self.fetched) + 8 * k, 8, self.fetched_mr.lkey)), r.atomic_rkey, r.atomic_addr, 1))
                    for k in range(n)]

                def op_at(k: int):
                    wr = wrs[k % n]

                    def op() -> None:
                        post(wr)
                        wait_completion(scq, "ATOMIC_FETCH_AND_ADD")
                    return op

                ops = [op_at(t) for t in range(iters)]
                for _ in range(warmup):
                    ops[0]()
                fetched[:n] = -1
                times = timed_sequence(ops)
                # Slot k last held the add of the last sample t with t % n == k: the counter before it.
                k = np.arange(min(n, iters))
                tally = fetched_tally(fetched[:len(k)], warmup + k + n * ((iters - 1 - k) // n))
        mismatch_tally = None
        with self._step():
            if self.me != origin:
                mismatch_tally = counter_tally(bytes(self.counter), warmup + iters)
        return Transfer(times, tally if self.me == origin else mismatch_tally)
