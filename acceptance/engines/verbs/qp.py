"""Connecting a queue pair as perftest does: GIDs, path MTU, the endpoint each side sends, the QP's
attributes for INIT, RTR and RTS."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from . import binding as pv
from .device import Settings
from .errors import VerbsError
from .memreg import access_flags


# perftest's constants (src/perftest_parameters.h, src/perftest_resources.h).
MIN_RNR_TIMER = 12          # MIN_RNR_TIMER: the encoded RNR NAK timer 12 = 0.64 ms
RX_DEPTH = 16               # receives kept posted for SEND / WRITE_WITH_IMM
IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"
GID_TYPE_ROCE_V2 = 1        # IBV_GID_TYPE_SYSFS_ROCE_V2; sysfs gid_attrs/types says "RoCE v2"


def mtu_bytes(mtu: int) -> int:
    """ibv_mtu value -> bytes (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5)."""
    return 128 << int(mtu)



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
        except pv.PyverbsError:
            continue
        try:
            gid_type = int(ctx.query_gid_type(port, i))
        except pv.PyverbsError:
            gid_type = None
        rows.append(GidRow(i, gid, gid_type))
    return rows


def path_mtu(a: int, b: int):
    """The path MTU of a connection: the smaller active MTU (ibv_mtu values) of its two ports."""
    return pv.e.ibv_mtu(min(int(a), int(b)))


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
    cap = pv.QPCap(max_send_wr=tx_depth, max_recv_wr=rx_depth, max_send_sge=1, max_recv_sge=1,
                max_inline_data=max_inline)
    return pv.QPInitAttr(qp_type=pv.e.ibv_qp_type.IBV_QPT_RC, scq=send_cq, rcq=recv_cq, cap=cap, sq_sig_all=0)


def ah_attr(local: Endpoint, remote: Endpoint, settings: Settings):
    """The address vector to the peer: a GRH (dgid, sgid index, hop limit, traffic class) on RoCE, the LID on IB."""
    if local.link_layer == pv.e.IBV_LINK_LAYER_ETHERNET:
        gr = pv.GlobalRoute(dgid=pv.GID(remote.gid), sgid_index=local.gid_index, hop_limit=settings.hop_limit,
                         traffic_class=settings.traffic_class)
        return pv.AHAttr(dlid=remote.lid, sl=settings.service_level, port_num=settings.port, is_global=1, gr=gr)
    return pv.AHAttr(dlid=remote.lid, sl=settings.service_level, port_num=settings.port, is_global=0)


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
        mask |= getattr(pv.e.ibv_qp_attr_mask, name)
    return int(mask)


def transition_attrs(local: Endpoint, remote: Endpoint, settings: Settings) -> list[tuple[str, object, int]]:
    """(state, QPAttr, attribute mask) for RESET->INIT, INIT->RTR, RTR->RTS of an RC QP, as perftest sets them."""
    states = pv.e.ibv_qp_state
    out_reads = max(1, min(local.max_rd_atomic, remote.max_rd_atomic))

    init = pv.QPAttr(qp_state=states.IBV_QPS_INIT, cur_qp_state=states.IBV_QPS_RESET, port_num=settings.port)
    init.pkey_index = 0
    init.qp_access_flags = access_flags(*QP_ACCESS_NAMES)

    rtr = pv.QPAttr(qp_state=states.IBV_QPS_RTR, cur_qp_state=states.IBV_QPS_INIT, port_num=settings.port,
                 path_mtu=path_mtu(local.mtu, remote.mtu))
    rtr.dest_qp_num = remote.qp_num
    rtr.rq_psn = remote.psn          # perftest: rq_psn = dest->psn
    rtr.max_dest_rd_atomic = out_reads
    rtr.min_rnr_timer = MIN_RNR_TIMER
    rtr.ah_attr = ah_attr(local, remote, settings)

    rts = pv.QPAttr(qp_state=states.IBV_QPS_RTS, cur_qp_state=states.IBV_QPS_RTR, port_num=settings.port)
    rts.timeout = settings.timeout
    rts.retry_cnt = settings.retry_count
    rts.rnr_retry = settings.rnr_retry
    rts.sq_psn = local.psn           # perftest: sq_psn = my_dest->psn
    rts.max_rd_atomic = out_reads
    return [("INIT", init, attr_mask(*INIT_MASK_NAMES)),
            ("RTR", rtr, attr_mask(*RTR_MASK_NAMES)),
            ("RTS", rts, attr_mask(*RTS_MASK_NAMES))]
