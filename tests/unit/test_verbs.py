"""The verbs engine without RDMA hardware: every attribute and work request it posts, built with
the real pyverbs; completion handling, GID / MTU choice, credit accounting, device selection;
and the PairLink methods end to end over a simulated device (two threads, fake QPs that carry
out the real pyverbs work requests on numpy memory).
"""

import ctypes
import errno
import os
import pickle
import resource
import socket
import struct
import subprocess
import sys
import threading
from collections import deque
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("pyverbs.device", reason="pyverbs (rdma-core's Python bindings, Debian python3-pyverbs) "
                    "does not import: run `make pyverbs` to link the distribution's package into the venv")

from pyverbs.addr import GID
from pyverbs.cq import WC
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QPAttr, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from threadpair import THREAD, run_pair  # noqa: E402

from acceptance.engines import gpumem, memory, verbs
from acceptance.engines.verbs import binding as pv
from acceptance.engines.verbs import device as vdev
from acceptance.engines.verbs import errors as verr
from acceptance.engines.verbs import link as vlink
from acceptance.engines.verbs import memreg as vmr
from acceptance.engines.verbs import qp as vqp
from acceptance.engines.verbs import wr as vwr
from acceptance.engines.verbs.binding import e  # the engine's enum shim
from acceptance.rules.profile import load_profile

# ---- reading back the C structs pyverbs will hand to ibv_post_send / ibv_post_recv -----------
# pyverbs 44 exposes no getter for wr.rdma / wr.atomic (rdma_remote_addr and rdma_rkey arrived in
# v63) and str(SendWR) does not print them, so the tests read the embedded C struct. Its layout
# is libibverbs' ABI (verbs.h): wr_id@0 next@8 sg_list@16 num_sge@24 opcode@28 send_flags@32
# imm_data@36, wr.rdma {remote_addr@40, rkey@48}, wr.atomic {remote_addr@40, compare_add@48,
# swap@56, rkey@64}; ibv_sge {addr, length, lkey}. Where the struct sits inside the Python object
# is found once from a marker wr_id, and every read is cross-checked against pyverbs' getters.

MARKER = 0x5EED_0BAD_CAFE_0001

# The engine the tests drive: each test sets its config (monkeypatch), as configure() would.
ENGINE = verbs.VerbsEngine()


def _struct_offset(obj) -> int:
    raw = ctypes.string_at(id(obj), type(obj).__basicsize__)
    offset = raw.find(struct.pack("<Q", MARKER))
    assert offset > 0 and raw.find(struct.pack("<Q", MARKER), offset + 1) < 0
    return offset


_CAL_SGE = SGE(0x1000, 8, 1)
SEND_OFFSET = _struct_offset(SendWR(wr_id=MARKER, num_sge=1, sg=[_CAL_SGE]))
RECV_OFFSET = _struct_offset(RecvWR(wr_id=MARKER, num_sge=1, sg=[_CAL_SGE]))


def c_send_wr(wr) -> SimpleNamespace:
    raw = ctypes.string_at(id(wr) + SEND_OFFSET, 72)
    wr_id, _next, sg_list, num_sge, opcode, flags, imm = struct.unpack_from("<QQQiIII", raw)
    assert (wr_id, num_sge, opcode, flags, imm) == (wr.wr_id, wr.num_sge, wr.opcode, wr.send_flags, wr.imm_data)
    remote_addr, rdma_rkey = struct.unpack_from("<QI", raw, 40)
    compare_add, swap, atomic_rkey = struct.unpack_from("<QQI", raw, 48)
    sges = [struct.unpack("<QII", ctypes.string_at(sg_list + 16 * i, 16)) for i in range(num_sge)]
    return SimpleNamespace(wr_id=wr_id, opcode=opcode, send_flags=flags, imm_data=imm, num_sge=num_sge,
                           sges=sges, remote_addr=remote_addr, rkey=rdma_rkey, compare_add=compare_add,
                           swap=swap, atomic_rkey=atomic_rkey)


def c_recv_wr(wr) -> SimpleNamespace:
    raw = ctypes.string_at(id(wr) + RECV_OFFSET, 28)
    wr_id, _next, sg_list, num_sge = struct.unpack("<QQQi", raw)
    assert (wr_id, num_sge) == (wr.wr_id, wr.num_sge)
    sges = [struct.unpack("<QII", ctypes.string_at(sg_list + 16 * i, 16)) for i in range(num_sge)]
    return SimpleNamespace(wr_id=wr_id, num_sge=num_sge, sges=sges)


# ---- endpoints -------------------------------------------------------------------------------

GID_A = "0000:0000:0000:0000:0000:ffff:0a00:0001"
GID_B = "0000:0000:0000:0000:0000:ffff:0a00:0002"


def endpoint(link_layer, **kw):
    base = vqp.Endpoint(qp_num=0x11, psn=0x123456, lid=7, gid=GID_A, gid_index=3,
                          mtu=int(e.ibv_mtu.IBV_MTU_4096), link_layer=int(link_layer), rkey=0xAA01,
                          addr=0x7F0000001000, length=1 << 20, atomic_rkey=0xAA02, atomic_addr=0x7F0000100000,
                          max_rd_atomic=16, device="mlx5_0", host="a")
    return replace(base, **kw)


IB = e.IBV_LINK_LAYER_INFINIBAND
ETH = e.IBV_LINK_LAYER_ETHERNET


def pair(link_layer):
    a = endpoint(link_layer)
    b = endpoint(link_layer, qp_num=0x22, psn=0x654321, lid=9, gid=GID_B, gid_index=5,
                 mtu=int(e.ibv_mtu.IBV_MTU_1024), rkey=0xBB01, addr=0x7F0000200000, atomic_rkey=0xBB02,
                 atomic_addr=0x7F0000300000, max_rd_atomic=4, device="mlx5_1", host="b")
    return a, b


SETTINGS = vdev.Settings(port=2, gid_index=-1, traffic_class=106, hop_limit=64, service_level=3,
                          tx_depth=64, cq_mod=16, timeout=18, retry_count=6, rnr_retry=5)


# ---- QP creation and transitions -----------------------------------------------------------------


def test_qp_init_attr_is_rc_with_selective_signaling():
    attr = vqp.qp_init_attr(None, None, tx_depth=128, rx_depth=16, max_inline=220)
    assert isinstance(attr, QPInitAttr)
    assert attr.qp_type == e.ibv_qp_type.IBV_QPT_RC
    assert attr.sq_sig_all == 0
    cap = attr.cap
    assert (cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data) == \
        (128, 16, 1, 1, 220)
    assert (attr.max_send_wr, attr.max_inline_data) == (128, 220)


# Masks as libibverbs/verbs.h defines the bits, independent of the enum shim.
STATE, ACCESS_FLAGS, PKEY_INDEX, PORT, AV, PATH_MTU = 1, 1 << 3, 1 << 4, 1 << 5, 1 << 7, 1 << 8
TIMEOUT, RETRY_CNT, RNR_RETRY, RQ_PSN, MAX_QP_RD_ATOMIC = 1 << 9, 1 << 10, 1 << 11, 1 << 12, 1 << 13
MIN_RNR_TIMER, SQ_PSN, MAX_DEST_RD_ATOMIC, DEST_QPN = 1 << 15, 1 << 16, 1 << 17, 1 << 20


def test_transition_masks_are_the_rc_masks():
    a, b = pair(IB)
    (s1, _, init), (s2, _, rtr), (s3, _, rts) = vqp.transition_attrs(a, b, SETTINGS)
    assert (s1, s2, s3) == ("INIT", "RTR", "RTS")
    assert init == STATE | PKEY_INDEX | PORT | ACCESS_FLAGS == 57
    assert rtr == STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
    assert rts == STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC


def test_init_attr_fields():
    a, b = pair(IB)
    init = vqp.transition_attrs(a, b, SETTINGS)[0][1]
    assert isinstance(init, QPAttr)
    assert init.qp_state == e.ibv_qp_state.IBV_QPS_INIT
    assert (init.port_num, init.pkey_index) == (2, 0)
    flags = e.ibv_access_flags
    assert init.qp_access_flags == (flags.IBV_ACCESS_LOCAL_WRITE | flags.IBV_ACCESS_REMOTE_WRITE
                                    | flags.IBV_ACCESS_REMOTE_READ | flags.IBV_ACCESS_REMOTE_ATOMIC)


def test_rtr_and_rts_follow_perftest_on_infiniband():
    a, b = pair(IB)
    _, (_, rtr, _), (_, rts, _) = vqp.transition_attrs(a, b, SETTINGS)
    assert rtr.qp_state == e.ibv_qp_state.IBV_QPS_RTR
    assert rtr.path_mtu == e.ibv_mtu.IBV_MTU_1024          # min(4096, 1024)
    assert rtr.dest_qp_num == b.qp_num
    assert rtr.rq_psn == b.psn                              # the peer's send PSN
    assert rtr.max_dest_rd_atomic == 4 and rtr.min_rnr_timer == 12
    ah = rtr.ah_attr
    assert (ah.is_global, ah.dlid, ah.sl, ah.port_num) == (0, b.lid, 3, 2)
    assert rts.qp_state == e.ibv_qp_state.IBV_QPS_RTS
    assert (rts.timeout, rts.retry_cnt, rts.rnr_retry) == (18, 6, 5)
    assert rts.sq_psn == a.psn and rts.max_rd_atomic == 4


def test_psns_match_across_the_pair():
    a, b = pair(IB)
    a_rtr, a_rts = (x[1] for x in vqp.transition_attrs(a, b, SETTINGS)[1:])
    b_rtr, b_rts = (x[1] for x in vqp.transition_attrs(b, a, SETTINGS)[1:])
    assert a_rtr.rq_psn == b_rts.sq_psn == b.psn
    assert b_rtr.rq_psn == a_rts.sq_psn == a.psn
    assert a_rtr.dest_qp_num == b.qp_num and b_rtr.dest_qp_num == a.qp_num


def test_perftest_defaults_from_the_profile():
    s = vdev.Settings.from_profile(load_profile())
    a, b = pair(IB)
    _, (_, rtr, _), (_, rts, _) = vqp.transition_attrs(a, b, s)
    assert (rts.timeout, rts.retry_cnt, rts.rnr_retry, rtr.min_rnr_timer) == (14, 7, 7, 12)
    assert (s.tx_depth, s.cq_mod, s.port) == (128, 100, 1)


def test_roce_address_vector_carries_a_grh():
    a, b = pair(ETH)
    rtr = vqp.transition_attrs(a, b, SETTINGS)[1][1]
    ah = rtr.ah_attr
    assert ah.is_global == 1 and ah.port_num == 2
    assert ah.dgid == GID_B
    assert (ah.sgid_index, ah.hop_limit, ah.traffic_class) == (a.gid_index, 64, 106)


def test_ah_attr_alone():
    a, b = pair(ETH)
    ah = vqp.ah_attr(a, b, SETTINGS)
    assert (ah.is_global, ah.dgid, ah.sgid_index) == (1, GID_B, 3)
    a, b = pair(IB)
    ah = vqp.ah_attr(a, b, SETTINGS)
    assert (ah.is_global, ah.dlid, ah.sl) == (0, 9, 3)


def test_endpoint_pickles_for_allgather():
    a, _ = pair(ETH)
    assert pickle.loads(pickle.dumps(a)) == a


def test_settings_validated():
    with pytest.raises(verr.VerbsError, match=r"\[verbs\] retry_count = 9"):
        vdev.Settings(retry_count=9)
    with pytest.raises(verr.VerbsError, match=r"\[verbs\] timeout"):
        vdev.Settings(timeout=40)


# ---- work requests -------------------------------------------------------------------------------

SIGNALED = e.ibv_send_flags.IBV_SEND_SIGNALED
INLINE = e.ibv_send_flags.IBV_SEND_INLINE


def test_sge():
    sg = vwr.sge(0x7F0000001000, 4096, 0x1234)
    assert isinstance(sg, SGE)
    assert (sg.addr, sg.length, sg.lkey) == (0x7F0000001000, 4096, 0x1234)


def _rdma_fields(wr, c):
    if hasattr(wr, "rdma_remote_addr"):  # rdma-core >= v63 exposes them
        assert (wr.rdma_remote_addr, wr.rdma_rkey) == (c.remote_addr, c.rkey)


@pytest.mark.parametrize("signaled,inline", [(True, False), (False, False), (True, True), (False, True)])
def test_write_wr(signaled, inline):
    sg = vwr.sge(0x7F0000001000, 64, 0x11)
    wr = vwr.write_wr(5, sg, 0xBEEF, 0x7F0000200000, signaled=signaled, inline=inline)
    assert isinstance(wr, SendWR)
    assert (wr.wr_id, wr.opcode, wr.num_sge) == (5, e.ibv_wr_opcode.IBV_WR_RDMA_WRITE, 1)
    assert wr.send_flags == (SIGNALED if signaled else 0) | (INLINE if inline else 0)
    assert ("IBV_SEND_SIGNALED" in str(wr)) == signaled and ("IBV_SEND_INLINE" in str(wr)) == inline
    c = c_send_wr(wr)
    assert (c.remote_addr, c.rkey) == (0x7F0000200000, 0xBEEF)
    assert c.sges == [(0x7F0000001000, 64, 0x11)]
    _rdma_fields(wr, c)


def test_write_imm_wr_puts_the_immediate_in_network_order():
    wr = vwr.write_imm_wr(1, vwr.sge(0x2000, 8, 0x11), 0xBEEF, 0x3000, imm=0x01020304)
    assert wr.opcode == e.ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM
    assert wr.imm_data == socket.htonl(0x01020304)
    assert wr.send_flags == SIGNALED
    c = c_send_wr(wr)
    assert (c.remote_addr, c.rkey, c.imm_data) == (0x3000, 0xBEEF, socket.htonl(0x01020304))


def test_read_wr():
    wr = vwr.read_wr(9, vwr.sge(0x2000, 1 << 20, 0x11), 0xCAFE, 0x5000, signaled=False)
    assert (wr.opcode, wr.send_flags, wr.num_sge) == (e.ibv_wr_opcode.IBV_WR_RDMA_READ, 0, 1)
    c = c_send_wr(wr)
    assert (c.remote_addr, c.rkey, c.sges) == (0x5000, 0xCAFE, [(0x2000, 1 << 20, 0x11)])


def test_atomic_faa_wr_adds_through_compare_add():
    wr = vwr.atomic_faa_wr(3, vwr.sge(0x2000, 8, 0x11), 0xA70, 0x6000, add=1)
    assert wr.opcode == e.ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD
    assert wr.send_flags == SIGNALED and wr.num_sge == 1
    c = c_send_wr(wr)
    assert (c.remote_addr, c.compare_add, c.swap, c.atomic_rkey) == (0x6000, 1, 0, 0xA70)
    assert c.sges == [(0x2000, 8, 0x11)]


def test_send_and_recv_wr():
    wr = vwr.send_wr(4, vwr.sge(0x2000, 8, 0x11), signaled=True, inline=True)
    assert (wr.opcode, wr.send_flags) == (e.ibv_wr_opcode.IBV_WR_SEND, SIGNALED | INLINE)
    assert c_send_wr(wr).sges == [(0x2000, 8, 0x11)]
    rwr = vwr.recv_wr(6, vwr.sge(0x4000, 4096, 0x12))
    assert isinstance(rwr, RecvWR)
    assert (rwr.wr_id, rwr.num_sge) == (6, 1)
    assert c_recv_wr(rwr).sges == [(0x4000, 4096, 0x12)]


def test_wr_id_can_be_rewritten_on_a_prebuilt_wr():
    wr = vwr.write_wr(0, vwr.sge(0x2000, 8, 0x11), 0xBEEF, 0x3000, signaled=False)
    wr.wr_id = 77
    assert c_send_wr(wr).wr_id == 77 and c_send_wr(wr).remote_addr == 0x3000


# ---- completions -------------------------------------------------------------------------------------

CAUSES = {
    "IBV_WC_RETRY_EXC_ERR": "transport retries exhausted: the peer did not ACK (wrong path, GID index, MTU or "
                            "a dead link; check ibv_devinfo, show_gids, the peer's port state)",
    "IBV_WC_REM_ACCESS_ERR": "remote access error: wrong rkey or the peer's MR lacks REMOTE_WRITE/READ/ATOMIC",
    "IBV_WC_RNR_RETRY_EXC_ERR": "receiver not ready",
    "IBV_WC_LOC_PROT_ERR": "local protection error",
    "IBV_WC_LOC_LEN_ERR": "local length error",
    "IBV_WC_WR_FLUSH_ERR": "flushed",
    "IBV_WC_REM_INV_REQ_ERR": "remote invalid request",
    "IBV_WC_REM_OP_ERR": "remote operation error",
    "IBV_WC_LOC_QP_OP_ERR": "local QP operation error",
}


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_check_completion_explains_each_status(name):
    status = getattr(e.ibv_wc_status, name)
    wc = WC(wr_id=41, status=status, opcode=e.ibv_wc_opcode.IBV_WC_RDMA_WRITE, vendor_err=0x81)
    with pytest.raises(verr.CompletionError) as info:
        verr.check_completion(wc, "RDMA WRITE")
    err = info.value
    assert err.status == int(status) and err.status_name == name and err.wr_id == 41
    assert CAUSES[name] in str(err)
    assert str(err).startswith(f"RDMA WRITE work request 41 failed with {name} ({int(status)}, vendor error 0x81)")


def test_check_completion_generic_and_success():
    verr.check_completion(WC(wr_id=1, status=e.ibv_wc_status.IBV_WC_SUCCESS))
    with pytest.raises(verr.CompletionError, match="completed with IBV_WC_GENERAL_ERR"):
        verr.check_completion(WC(status=e.ibv_wc_status.IBV_WC_GENERAL_ERR))
    fake = SimpleNamespace(status=int(e.ibv_wc_status.IBV_WC_REM_ACCESS_ERR), wr_id=2)  # no vendor_err
    with pytest.raises(verr.CompletionError, match="^work request 2 failed with IBV_WC_REM_ACCESS_ERR"):
        verr.check_completion(fake)


# ---- credit accounting ------------------------------------------------------------------------------


class FakeSendQueue:
    """Hardware as the Window sees it: every WR holds a send-queue slot until a signaled WR at or after
    it completes; only signaled WRs produce completions, in order, `per_poll` at a time."""

    def __init__(self, depth, per_poll=1):
        self.depth, self.per_poll = depth, per_poll
        self.queue, self.cqes = deque(), deque()
        self.posted, self.signaled, self.max_in_flight = [], [], 0

    def post(self, index, signaled):
        assert len(self.queue) < self.depth, "send queue overflow (ibv_post_send would fail)"
        self.queue.append(index)
        self.posted.append(index)
        self.max_in_flight = max(self.max_in_flight, len(self.queue))
        if signaled:
            self.signaled.append(index)
            self.cqes.append(index)

    def poll(self):
        out = []
        while self.cqes and len(out) < self.per_poll:
            index = self.cqes.popleft()
            while self.queue and self.queue[0] <= index:
                self.queue.popleft()
            out.append(index)
        return out


@pytest.mark.parametrize("total,depth,cq_mod,per_poll", [
    (300, 128, 100, 1),   # window larger than tx_depth, cq_mod not dividing it
    (64, 128, 100, 1),    # window smaller than cq_mod: only the last WR signals
    (250, 16, 5, 3),
    (7, 3, 2, 1),
    (50, 8, 100, 2),      # cq_mod > tx_depth is capped at tx_depth
    (1, 128, 100, 1),
])
def test_window_keeps_depth_and_signals_every_cq_mod_and_the_last(total, depth, cq_mod, per_poll):
    hw = FakeSendQueue(depth, per_poll)
    win = vwr.Window(total, depth, cq_mod)
    win.run(hw.post, hw.poll)
    assert hw.posted == list(range(total))
    assert hw.max_in_flight <= depth
    step = min(cq_mod, depth)
    assert hw.signaled == sorted({i for i in range(total) if (i + 1) % step == 0} | {total - 1})
    assert total - 1 in hw.signaled
    assert win.done and win.in_flight == 0 and not hw.queue
    win.run(hw.post, hw.poll)  # reusable: the next iteration starts from zero
    assert hw.posted == list(range(total)) * 2


def test_window_returns_credits_per_completion():
    win = vwr.Window(10, 4, 3)
    assert [win.next() for _ in range(4)] == [(0, False), (1, False), (2, True), (3, False)]
    assert not win.can_post()
    with pytest.raises(verr.VerbsError, match="no credit"):
        win.next()
    assert win.complete(2) == 3 and win.in_flight == 1
    assert [win.next() for _ in range(3)] == [(4, False), (5, True), (6, False)]
    with pytest.raises(verr.VerbsError, match="unexpected completion of work request 4"):
        win.complete(4)  # unsignaled WRs never complete on their own
    assert win.complete(5) == 3
    assert [win.next() for _ in range(3)] == [(7, False), (8, True), (9, True)]  # 9 is the last
    assert win.complete(8) == 3 and win.complete(9) == 1 and win.done


def test_window_gives_up_when_nothing_completes():
    win = vwr.Window(4, 2, 100)
    posted = []
    with pytest.raises(verr.VerbsError, match="got no completion"):
        win.run(lambda i, s: posted.append(i), lambda: (), timeout_s=0.01)
    assert posted == [0, 1]


def test_window_propagates_completion_errors():
    def poll():
        verr.check_completion(WC(wr_id=0, status=e.ibv_wc_status.IBV_WC_RETRY_EXC_ERR))

    with pytest.raises(verr.CompletionError, match="RETRY_EXC_ERR"):
        vwr.Window(4, 2, 1).run(lambda i, s: None, poll)


# ---- GIDs, MTU, memlock, counters ----------------------------------------------------------------------

ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
V1, V2 = 0, int(e.ibv_gid_type_sysfs.IBV_GID_TYPE_SYSFS_ROCE_V2)
assert V2 == vqp.GID_TYPE_ROCE_V2  # the constant the engine (and the perftest cross-check) uses


def test_choose_gid_index_prefers_roce_v2_ipv4_mapped():
    rows = [vqp.GidRow(0, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", V1),
            vqp.GidRow(1, "fe80:0000:0000:0000:0a00:00ff:fe00:0001", V2),
            vqp.GidRow(2, GID_A, V1),
            vqp.GidRow(3, GID_A, V2),
            vqp.GidRow(4, ZERO, V2)]
    assert vqp.choose_gid_index(rows) == 3
    assert vqp.choose_gid_index(rows[:3]) == 1            # RoCE v2 before IPv4-mapped v1
    assert vqp.choose_gid_index(rows[:1] + rows[2:3]) == 2  # IPv4-mapped among v1
    same = [vqp.GidRow(0, "fe80:0000:0000:0000:0000:0000:0000:0001", V2),
            vqp.GidRow(5, "fe80:0000:0000:0000:0000:0000:0000:0002", V2)]
    assert vqp.choose_gid_index(same) == 5                # a non-zero index
    with pytest.raises(verr.VerbsError, match="no usable GID"):
        vqp.choose_gid_index([vqp.GidRow(i, ZERO, V2) for i in range(4)])
    assert vqp.gid_is_zero(str(GID(ZERO))) and not vqp.gid_is_zero(str(GID(GID_A)))


def test_path_mtu_is_the_smaller():
    mtu = e.ibv_mtu
    assert vqp.path_mtu(mtu.IBV_MTU_4096, mtu.IBV_MTU_1024) == mtu.IBV_MTU_1024
    assert vqp.path_mtu(mtu.IBV_MTU_2048, mtu.IBV_MTU_4096) == mtu.IBV_MTU_2048
    assert isinstance(vqp.path_mtu(5, 5), e.ibv_mtu)
    assert vqp.mtu_bytes(mtu.IBV_MTU_4096) == 4096 and vqp.mtu_bytes(mtu.IBV_MTU_256) == 256


def test_memlock_explanation():
    err = PyverbsRDMAError("Failed to register a MR. length: 1048576, access flags: 7", errno.ENOMEM)
    text = vmr.memlock_explanation(err, 65536)
    assert "Errno: 12" in text and "pins memory" in text
    assert "ulimit -l) is currently 65536 bytes (64 KiB" in text and "unlimited" in text
    text = vmr.memlock_explanation(err, resource.RLIM_INFINITY)
    assert "already unlimited" in text and "another reason" in text


@pytest.mark.parametrize("code,explained", [(errno.ENOMEM, True), (errno.EPERM, True), (errno.EINVAL, False)])
def test_registration_errors_become_verbs_errors(monkeypatch, code, explained):
    def refuse(*args, **kwargs):
        raise PyverbsRDMAError("Failed to register a MR", code)

    monkeypatch.setattr(pv, "MR", refuse)
    with pytest.raises(verr.VerbsError) as info:
        vmr.register(None, memory.allocate(4096), vmr.access_flags("IBV_ACCESS_LOCAL_WRITE"))
    assert ("memlock" in str(info.value) or "ulimit -l" in str(info.value)) == explained
    assert "registering 4096 B failed" in str(info.value) or explained


def test_zero_keys_are_refused():
    with pytest.raises(verr.VerbsError, match="lkey 0x0, rkey 0x5"):
        vmr.check_keys(SimpleNamespace(lkey=0, rkey=5), 4096)


def test_register_times_needs_configure(monkeypatch):
    monkeypatch.setattr(ENGINE, "config", None)
    with pytest.raises(verr.VerbsError, match="not configured"):
        ENGINE.register_times(4096, 1, "create")
    with pytest.raises(ValueError, match="allocate"):
        verbs.VerbsEngine(vdev.Config("mlx5_0", vdev.Settings())).register_times(4096, 1, "bogus")


class RecordingMR:
    def __init__(self, log, pd, length, access, address):
        self.lkey = self.rkey = 0 if log.get("zero") else 0x42
        log.setdefault("regs", []).append((address, length, access, bytes(memoryview(
            (ctypes.c_char * min(length, 8)).from_address(address)))))

    def close(self):
        pass


@pytest.fixture
def recording_device(monkeypatch):
    log = {}
    monkeypatch.setattr(ENGINE, "config", vdev.Config("mlx5_0", vdev.Settings()))
    monkeypatch.setattr(pv, "Context", lambda name: FakeObject())
    monkeypatch.setattr(pv, "PD", lambda ctx: FakeObject())
    monkeypatch.setattr(pv, "MR", lambda pd, length, access, address: RecordingMR(log, pd, length, access, address))
    return log


def test_register_times_modes(recording_device):
    reg, dereg = ENGINE.register_times(3 * 4096, 4, "allocate")
    assert reg.dtype == dereg.dtype == np.int64 and len(reg) == len(dereg) == 4
    assert (reg >= 0).all() and (dereg >= 0).all()
    regs = recording_device.pop("regs")
    access = vmr.access_flags("IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE", "IBV_ACCESS_REMOTE_READ")
    assert all(addr % 4096 == 0 and length == 3 * 4096 and acc == access for addr, length, acc, _ in regs)
    assert all(head == bytes(8) for *_, head in regs)  # fresh zero pages
    ENGINE.register_times(4096, 3, "create")
    assert len({addr for addr, *_ in recording_device["regs"]}) == 1  # one warm buffer
    assert isinstance(ENGINE.registration_growth(1 << 16, 5), int)
    recording_device["zero"] = True
    with pytest.raises(verr.VerbsError, match="a zero lkey cannot be used"):
        ENGINE.register_times(4096, 1, "create")


def test_fresh_pages_are_page_aligned_and_writable():
    buf = vmr.fresh_pages(3 * 4096 + 5)
    assert buf.ctypes.data % 4096 == 0 and len(buf) == 3 * 4096 + 5 and buf.dtype == np.uint8
    assert not buf.any()
    buf[:] = 7


def test_counter_check_in_either_byte_order():
    assert memory.check_counter((1010).to_bytes(8, "little"), 1010) is None
    assert memory.check_counter((1010).to_bytes(8, "big"), 1010) is None
    bad = memory.check_counter((1009).to_bytes(8, "little"), 1010)
    assert isinstance(bad, memory.Mismatch) and bad.nbytes == 8 and bad.offset == 0
    assert (bad.value, bad.expected_value) == (1009, 1010)
    assert str(bad) == "atomic counter holds 1009 after 1010 fetch-and-adds of 1: lost atomic updates"


# ---- availability and device choice -----------------------------------------------------------------------


def test_available_never_raises_and_says_why():
    ok, why = verbs.available()
    assert isinstance(ok, bool) and why
    try:
        pv.get_device_list()
    except PyverbsRDMAError:
        assert not ok and why.startswith("get_device_list() failed: Failed to get devices list (")
        if not __import__("os").path.isdir("/sys/class/infiniband"):
            assert why.endswith("(no /sys/class/infiniband: no RDMA device or driver)")
    else:
        pytest.skip(f"this host lists RDMA devices: {why}")


def test_available_reasons(monkeypatch):
    monkeypatch.setattr(pv, "get_device_list", list)
    ok, why = verbs.available()
    assert not ok and why.startswith("no RDMA devices (")

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(pv, "get_device_list", broken)
    assert verbs.available() == (False, "get_device_list() failed: RuntimeError: boom")
    monkeypatch.setattr(pv, "IMPORT_ERROR", ImportError("libibverbs.so.1: cannot open shared object file"))
    ok, why = verbs.available()
    assert not ok and why == "pyverbs not importable: libibverbs.so.1: cannot open shared object file"


HOST_PORTS = {"mlx5_0": [(4, 1)], "mlx5_1": [(4, 2), (1, 2)]}  # (state, link layer) per port


class FakeDeviceContext:
    """Context(name=...) of a host with mlx5_0 (IB, active) and mlx5_1 (two Ethernet ports, one down)."""

    def __init__(self, name):
        if name == "broken":
            raise PyverbsRDMAError("Failed to open device broken")
        self.ports = HOST_PORTS[name]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def query_device(self):
        return SimpleNamespace(phys_port_cnt=len(self.ports))

    def query_port(self, p):
        state, link = self.ports[p - 1]
        return SimpleNamespace(state=state, link_layer=link)


def test_available_lists_devices_and_ports(monkeypatch):
    devices = [SimpleNamespace(name=n) for n in (b"mlx5_0", b"mlx5_1", b"broken")]
    monkeypatch.setattr(pv, "get_device_list", lambda: devices)
    monkeypatch.setattr(pv, "Context", lambda name: FakeDeviceContext(name))
    ok, why = verbs.available()
    assert ok
    assert why == ("3 device(s): mlx5_0 (port 1 ACTIVE, InfiniBand), "
                   "mlx5_1 (port 1 ACTIVE, Ethernet; port 2 DOWN, Ethernet), "
                   "broken (cannot open: Failed to open device broken)")


def test_available_when_no_device_opens(monkeypatch):
    monkeypatch.setattr(pv, "get_device_list", lambda: [SimpleNamespace(name=b"broken")])
    monkeypatch.setattr(pv, "Context", lambda name: FakeDeviceContext(name))
    why = "1 device(s), none can be opened: broken (cannot open: Failed to open device broken)"
    assert verbs.available() == (False, why)


def test_engine_imports_without_pyverbs():
    code = ("import sys; sys.modules['pyverbs'] = None\n"
            "from acceptance.engines import verbs\n"
            "from acceptance.engines.verbs import device as vdev, errors as verr\n"
            "print(verbs.available())\n"
            "try:\n    vdev.open_context('mlx5_0')\nexcept verr.VerbsError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(("(False, 'pyverbs not importable: ", '(False, "pyverbs not importable: '))
    assert lines[1].startswith("pyverbs not importable")


def topology(rank, node, rail, rails, nics=None):
    nics = nics or {}
    ranks = [SimpleNamespace(rank=r, node=node, rail=ra, nic=nics.get(r), host="host1") for r, ra in enumerate(rails)]
    return SimpleNamespace(rank=rank, node=node, rail=rail, rails=sorted(set(rails)), me=ranks[rank], ranks=ranks,
                           ranks_on=lambda n: [r for r in ranks if r.node == n])


def test_pick_device_by_rail():
    topo = topology(1, "node1", 1, [0, 1])
    assert vdev.pick_device(["mlx5_1", "mlx5_0"], topo, {}) == "mlx5_1"      # i-th device is rail i
    assert vdev.pick_device(["mlx5_0", "mlx5_1"], topo, {"mlx5_0": 1, "mlx5_1": 0}) == "mlx5_0"
    bound = topology(0, "node1", 0, [0, 1], nics={0: "mlx5_3", 1: "mlx5_2"})
    assert vdev.pick_device(["mlx5_2", "mlx5_3", "mlx5_4"], bound, {}) == "mlx5_3"  # the launcher's binding
    with pytest.raises(verr.VerbsError, match=r"rail 1 \(rank 1 on node1\) has no RDMA device: "
                                               r"mlx5_0 -> no rail, mlx5_1 -> no rail, mlx5_2 -> no rail"):
        vdev.pick_device(["mlx5_0", "mlx5_1", "mlx5_2"], topo, {})


def test_configure_without_a_device_names_the_rail(monkeypatch):
    def fail():
        raise PyverbsRDMAError("Failed to get devices list")

    monkeypatch.setattr(pv, "get_device_list", fail)
    monkeypatch.setattr(ENGINE, "config", None)
    with pytest.raises(verr.VerbsError, match=r"^rail 1 \(rank 3 on node2\) has no RDMA device: "
                                               r"get_device_list\(\) failed: Failed to get devices list"):
        ENGINE.configure(topology(3, "node2", 1, [0, 1, 0, 1]), load_profile())
    assert ENGINE.config is None


def test_configure_on_this_host_without_devices(monkeypatch):
    ok, why = verbs.available()
    if ok:
        pytest.skip(f"this host has RDMA devices: {why}")
    monkeypatch.setattr(ENGINE, "config", None)
    with pytest.raises(verr.VerbsError, match=r"^rail 0 \(rank 0 on node1\) has no RDMA device"):
        ENGINE.configure(topology(0, "node1", 0, [0, 1]), load_profile())


def test_configure_picks_the_rails_device_and_the_settings(monkeypatch, tmp_path):
    monkeypatch.setattr(pv, "get_device_list", lambda: [SimpleNamespace(name=b"mlx5_0"),
                                                           SimpleNamespace(name=b"mlx5_1")])
    monkeypatch.setattr(ENGINE, "config", None)
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(tmp_path))  # no numa_node: the rank stays where it is
    ENGINE.configure(topology(1, "node1", 1, [0, 1]), load_profile())
    assert ENGINE.configured() == vdev.Config("mlx5_1", vdev.Settings(),
                                              placement="mlx5_1: no NUMA node in sysfs; not bound")
    assert ENGINE.placement() == "mlx5_1: no NUMA node in sysfs; not bound"
    off = tmp_path / "off.toml"
    off.write_text("[verbs]\nnuma_bind = false\n")
    ENGINE.configure(topology(1, "node1", 1, [0, 1]), load_profile(str(off)))
    assert ENGINE.placement() == "not bound (verbs.numa_bind = false)"


def test_oversubscribed_counts_the_nodes_cpus_not_the_ranks_mask(monkeypatch, tmp_path):
    """Two ranks bound to one core each on a 64-CPU node share nothing; six on a 2-CPU guest do."""
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(tmp_path))
    monkeypatch.setattr(pv, "get_device_list", lambda: [SimpleNamespace(name=b"mlx5_0"),
                                                           SimpleNamespace(name=b"mlx5_1")])
    monkeypatch.setattr(vdev.os, "sched_getaffinity", lambda pid: {3})
    monkeypatch.setattr(vdev.os, "cpu_count", lambda: 64)
    assert not vdev.configuration(topology(1, "node1", 1, [0, 1]), load_profile()).oversubscribed
    monkeypatch.setattr(vdev.os, "cpu_count", lambda: 1)
    assert vdev.configuration(topology(1, "node1", 1, [0, 1]), load_profile()).oversubscribed


# ---- PairLink over a simulated device ----------------------------------------------------------------------
# Two PairLinks in two threads, joined by a threaded 2-rank "communicator". The fake QP carries out
# the real pyverbs SendWR / RecvWR the engine posts (decoded from their C structs) on the numpy
# buffers, checks rkeys, access flags and send-queue depth, and produces real pyverbs WCs for
# signaled WRs only, as a device does. What this cannot show: timing, the wire, the driver.

WC_OF = {e.ibv_wr_opcode.IBV_WR_RDMA_WRITE: e.ibv_wc_opcode.IBV_WC_RDMA_WRITE,
         e.ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM: e.ibv_wc_opcode.IBV_WC_RDMA_WRITE,
         e.ibv_wr_opcode.IBV_WR_SEND: e.ibv_wc_opcode.IBV_WC_SEND,
         e.ibv_wr_opcode.IBV_WR_RDMA_READ: e.ibv_wc_opcode.IBV_WC_RDMA_READ,
         e.ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD: e.ibv_wc_opcode.IBV_WC_FETCH_ADD}
ACC = e.ibv_access_flags
OK = e.ibv_wc_status.IBV_WC_SUCCESS


class Fabric:
    def __init__(self):
        self.lock = threading.Lock()
        self.mrs, self.qps, self.next_key, self.lids = {}, {}, 0x100, iter(range(1, 100))
        self.modifies = []
        self.link_layers = {0: IB, 1: IB}  # per pair rank
        self.fault: tuple[int, str] | None = None  # (opcode, mode): every second such WR misbehaves
        self.calls, self.last = 0, None

    def deliver(self, op, dst: int, src: int, length: int) -> bool:
        """memmove, or the fault of tests/faults.py on every second WR of the faulty opcode; False
        when nothing moved (a dropped atomic applies no add)."""
        if self.fault is None or self.fault[0] != op:
            ctypes.memmove(dst, src, length)
            return True
        self.calls += 1
        previous, self.last = self.last, ctypes.string_at(src, length)
        mode = self.fault[1]
        if self.calls % 2:
            ctypes.memmove(dst, src, length)
        elif mode == "drop":
            return False
        elif mode == "half":
            ctypes.memmove(dst, src, length // 2)
        elif mode == "flip":
            ctypes.memmove(dst, src, length)
            (ctypes.c_uint8 * length).from_address(dst)[length // 3] ^= 1 << 4
        elif previous is not None and len(previous) == length:
            ctypes.memmove(dst, previous, length)
        return True

    def key(self):
        with self.lock:
            self.next_key += 1
            return self.next_key


class FakeObject:
    closed = False

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class FakeContext(FakeObject):
    def __init__(self, fabric, name):
        self.fabric, self.name, self.lid = fabric, name, next(fabric.lids)
        self.link_layer = fabric.link_layers[THREAD.rank]

    def query_device(self):
        return SimpleNamespace(phys_port_cnt=1, atomic_caps=e.ibv_atomic_cap.IBV_ATOMIC_HCA,
                               max_qp_rd_atom=16, max_qp_init_rd_atom=16)

    def query_port(self, port):
        return SimpleNamespace(state=e.ibv_port_state.IBV_PORT_ACTIVE, link_layer=self.link_layer,
                               lid=self.lid if self.link_layer == IB else 0,
                               active_mtu=e.ibv_mtu.IBV_MTU_4096 if self.lid % 2 else e.ibv_mtu.IBV_MTU_2048,
                               gid_tbl_len=4)

    def query_gid(self, port, index):
        if self.link_layer == IB:
            return GID(f"fe80:0000:0000:0000:0000:0000:0000:{self.lid:04x}")
        return GID(ZERO if index == 0 else f"0000:0000:0000:0000:0000:ffff:0a00:{self.lid * 16 + index:04x}")

    def query_gid_type(self, port, index):
        return V2 if index == 3 else V1


class FakeCQ(FakeObject):
    def __init__(self, ctx, cqe):
        self.entries, self.cqe = deque(), cqe

    def push(self, wc, qp=None, slots=0):
        assert len(self.entries) < self.cqe, "CQ overrun"
        self.entries.append((wc, qp, slots))

    def poll(self, n=1):
        out = []
        while self.entries and len(out) < n:
            wc, qp, slots = self.entries.popleft()
            if qp is not None:
                qp.in_flight -= slots  # the polled completion frees its WRs' send-queue slots
            out.append(wc)
        return len(out), out


class FakeMR(FakeObject):
    def __init__(self, fabric, pd, length, access, address):
        assert address, "the engine registers its own buffers"
        self.fabric, self.buf, self.length, self.access = fabric, address, length, access
        self.lkey = self.rkey = fabric.key()
        fabric.mrs[self.rkey] = self

    def close(self):
        self.fabric.mrs.pop(self.rkey, None)


class FakeQP(FakeObject):
    def __init__(self, fabric, pd, init):
        self.fabric = fabric
        self.scq, self.rcq, self.max_send_wr, self.max_recv_wr, self.max_inline = init
        self.qp_num = fabric.key()
        fabric.qps[self.qp_num] = self
        self.rq, self.in_flight, self.unsignaled, self.state, self.error = deque(), 0, 0, "RESET", False

    def modify(self, attr, mask):
        self.fabric.modifies.append((self.qp_num, int(attr.qp_state), mask))
        self.state = {1: "INIT", 2: "RTR", 3: "RTS"}[int(attr.qp_state)]
        if self.state == "RTR":
            self.dest = attr.dest_qp_num

    def post_recv(self, wr):
        assert len(self.rq) < self.max_recv_wr
        self.rq.append(c_recv_wr(wr))

    def _remote(self, rkey, addr, length, flag):
        mr = self.fabric.mrs.get(rkey)
        if mr is None or not mr.access & flag or not mr.buf <= addr <= mr.buf + mr.length - length:
            return None
        return addr

    def post_send(self, wr):
        if self.in_flight >= self.max_send_wr:
            raise PyverbsRDMAError("Failed to post send", errno.ENOMEM)
        assert self.state == "RTS"
        c = c_send_wr(wr)
        peer = self.fabric.qps[self.dest]
        (laddr, length, lkey), = c.sges
        assert lkey in self.fabric.mrs
        if c.send_flags & INLINE:
            assert length <= self.max_inline
        op, status = c.opcode, OK
        if self.error:
            status = e.ibv_wc_status.IBV_WC_WR_FLUSH_ERR
        elif op in (e.ibv_wr_opcode.IBV_WR_RDMA_WRITE, e.ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM):
            dst = self._remote(c.rkey, c.remote_addr, length, ACC.IBV_ACCESS_REMOTE_WRITE)
            if dst is None:
                status = e.ibv_wc_status.IBV_WC_REM_ACCESS_ERR
            else:
                self.fabric.deliver(op, dst, laddr, length)
                if op == e.ibv_wr_opcode.IBV_WR_RDMA_WRITE_WITH_IMM:
                    recv = peer.rq.popleft()
                    peer.rcq.push(WC(wr_id=recv.wr_id, status=OK, byte_len=length, imm_data=c.imm_data,
                                     opcode=e.ibv_wc_opcode.IBV_WC_RECV_RDMA_WITH_IMM,
                                     wc_flags=e.ibv_wc_flags.IBV_WC_WITH_IMM))
        elif op == e.ibv_wr_opcode.IBV_WR_SEND:
            recv = peer.rq.popleft()
            (raddr, rlength, _), = recv.sges
            assert length <= rlength
            ctypes.memmove(raddr, laddr, length)
            peer.rcq.push(WC(wr_id=recv.wr_id, status=OK, byte_len=length, opcode=e.ibv_wc_opcode.IBV_WC_RECV))
        elif op == e.ibv_wr_opcode.IBV_WR_RDMA_READ:
            src = self._remote(c.rkey, c.remote_addr, length, ACC.IBV_ACCESS_REMOTE_READ)
            if src is None:
                status = e.ibv_wc_status.IBV_WC_REM_ACCESS_ERR
            else:
                self.fabric.deliver(op, laddr, src, length)
        elif op == e.ibv_wr_opcode.IBV_WR_ATOMIC_FETCH_AND_ADD:
            dst = self._remote(c.atomic_rkey, c.remote_addr, 8, ACC.IBV_ACCESS_REMOTE_ATOMIC)
            if dst is None or length != 8:
                status = e.ibv_wc_status.IBV_WC_REM_ACCESS_ERR
            else:
                old = ctypes.c_uint64(ctypes.c_uint64.from_address(dst).value)
                if self.fabric.deliver(op, laddr, ctypes.addressof(old), 8):
                    ctypes.c_uint64.from_address(dst).value = old.value + c.compare_add
        self.in_flight += 1
        self.unsignaled += 1
        if status != OK:
            self.error = True
        if c.send_flags & SIGNALED or status != OK:
            self.scq.push(WC(wr_id=c.wr_id, status=status, opcode=WC_OF[op]), self, self.unsignaled)
            self.unsignaled = 0




@pytest.fixture
def fake_device(monkeypatch):
    fabric = Fabric()
    monkeypatch.setattr(pv, "Context", lambda name: FakeContext(fabric, name))
    monkeypatch.setattr(pv, "PD", lambda ctx: FakeObject())
    monkeypatch.setattr(pv, "CQ", FakeCQ)
    monkeypatch.setattr(pv, "MR", lambda pd, length, access, address: FakeMR(fabric, pd, length, access, address))
    monkeypatch.setattr(pv, "QP", lambda pd, init: FakeQP(fabric, pd, init))
    monkeypatch.setattr(vlink, "qp_init_attr", lambda scq, rcq, tx, rx, inline: (scq, rcq, tx, rx, inline))
    monkeypatch.setattr(ENGINE, "config", vdev.Config("fake0", vdev.Settings(tx_depth=8, cq_mod=3)))
    monkeypatch.delenv(memory.FLIP_ENV, raising=False)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # the spinning ping-pong threads hand the GIL over quickly
    yield fabric
    sys.setswitchinterval(interval)


def with_link(max_size, body):
    def run(comm):
        link = ENGINE.PairLink(comm, max_size)
        try:
            return body(link)
        finally:
            link.free()
    return run_pair(run)


def no_errors(results):
    for _, exc in results:
        if exc is not None:
            raise exc
    return [r for r, _ in results]


def test_pair_link_connects_both_queue_pairs(fake_device):
    def body(link):
        return link.local, link.remote, link.qp.state, link.qp.dest

    (a_local, a_remote, a_state, a_dest), (b_local, b_remote, _, b_dest) = no_errors(with_link(4096, body))
    assert a_local == b_remote and b_local == a_remote and a_state == "RTS"
    assert a_dest == b_local.qp_num and b_dest == a_local.qp_num
    masks = {state: mask for _, state, mask in fake_device.modifies}
    assert masks == {1: 57, 2: STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
                     3: STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC}
    assert not fake_device.mrs  # free() deregistered everything


@pytest.mark.parametrize("origin", [0, 1])
def test_put_bandwidth_moves_and_verifies_the_pattern(fake_device, origin):
    def body(link):
        return [link.put_bandwidth(size, 3, 1, 20, origin, (0, 1, size)) for size in (1, 100, 4096)]

    results = no_errors(with_link(4096, body))
    for size_index, size in enumerate((1, 100, 4096)):
        mine, theirs = results[origin][size_index], results[1 - origin][size_index]
        assert mine.tally is None and len(mine.times_ns) == 3 and (mine.times_ns > 0).all()
        assert theirs.times_ns is None and theirs.tally.ops > 0 and not theirs.tally.failed


def test_put_bandwidth_reports_a_flipped_bit(fake_device, monkeypatch):
    monkeypatch.setenv(memory.FLIP_ENV, "10:3")
    results = no_errors(with_link(64, lambda link: link.put_bandwidth(64, 2, 0, 4, 0, (0, 1, 0))))
    # One slot of 64 B fits the link: each of the 2 iterations is a verified batch, each flipped once.
    assert results[1].tally.ops == results[1].tally.failed == results[1].tally.wrong == 2
    assert "first wrong byte at offset 10 of 64" in results[1].tally.first


def test_put_bandwidth_budget_keeps_two_iterations(fake_device):
    results = no_errors(with_link(64, lambda link: link.put_bandwidth(64, 50, 0, 4, 0, (0, 1, 0), budget_s=0)))
    assert len(results[0].times_ns) == 2


def test_read_bandwidth_verifies_at_the_origin(fake_device):
    results = no_errors(with_link(4096, lambda link: link.read_bandwidth(4096, 3, 1, 10, 1, (1, 0, 2))))
    assert results[1].tally.ops > 0 and not results[1].tally.failed and len(results[1].times_ns) == 3
    assert results[0].times_ns is None and results[0].tally is None


@pytest.mark.parametrize("method", ["put_latency", "pingpong_latency", "write_imm_latency", "read_latency"])
def test_latencies_return_samples_at_the_origin(fake_device, method):
    def times(got):  # put_latency and read_latency return a Transfer (with its data check)
        return getattr(got, "times_ns", got)

    results = no_errors(with_link(64, lambda link: [getattr(link, method)(size, 10, 2, 1) for size in (8, 64)]))
    for samples in results[1]:
        samples = times(samples)
        assert samples.dtype == np.int64 and len(samples) == 10 and (samples >= 0).all()
    assert [times(t) for t in results[0]] == [None, None]


def test_atomic_latency_counts_on_the_target(fake_device):
    results = no_errors(with_link(64, lambda link: link.atomic_latency(25, 5, 0)))
    # 64 B of fetched slots: 8 slots, reused in turn; each is checked for its last add.
    assert len(results[0].times_ns) == 25 and results[0].tally.ops == 8 and not results[0].tally.failed
    assert results[1].times_ns is None and results[1].tally.ops == 1 and not results[1].tally.failed


# Mutation tests at the engine boundary: the simulated device drops, halves, flips or delivers a stale
# payload for every second WR of one opcode; every verified operation's check must fail.
W = e.ibv_wr_opcode


@pytest.mark.parametrize("mode", ["drop", "half", "flip", "stale"])
@pytest.mark.parametrize("name, opcode, run, checker", [
    ("write", W.IBV_WR_RDMA_WRITE, lambda link, size: link.put_bandwidth(size, 6, 1, 4, 0, (0, 1, 3)), 1),
    ("read", W.IBV_WR_RDMA_READ, lambda link, size: link.read_bandwidth(size, 6, 1, 4, 0, (0, 1, 4)), 0),
    ("read latency", W.IBV_WR_RDMA_READ, lambda link, size: link.read_latency(size, 20, 2, 0, (0, 1, 5)), 0),
    ("atomic", W.IBV_WR_ATOMIC_FETCH_AND_ADD, lambda link, size: link.atomic_latency(20, 2, 0), 0),
])
@pytest.mark.parametrize("size", [8, 512, 4096])
def test_every_fault_of_a_verified_operation_fails_its_check(fake_device, mode, name, opcode, run, checker, size):
    if name == "atomic" and size != 8:
        pytest.skip("an atomic is 8 bytes")
    if name == "atomic" and mode == "half":
        pytest.skip("half of 8 bytes of a small counter value is the same value")
    fake_device.fault = (opcode, mode)
    results = no_errors(with_link(4096 * 8, lambda link: run(link, size)))
    tally = results[checker].tally
    assert tally.ops > 0 and tally.failed > 0 and tally.wrong > 0, (name, mode, tally)
    if mode == "drop" and name != "atomic":
        assert tally.missing > 0


def test_a_failed_completion_is_raised_on_both_ranks(fake_device):
    def body(link):
        if link.me == 0:
            link.remote = replace(link.remote, rkey=0xBAD)
        return link.put_bandwidth(64, 2, 0, 4, 0, (0, 1, 0))

    (_, origin_error), (_, target_error) = with_link(64, body)
    assert isinstance(origin_error, verr.CompletionError) and "IBV_WC_REM_ACCESS_ERR" in str(origin_error)
    assert isinstance(target_error, verr.VerbsError)
    assert "the peer (pair rank 0) failed: CompletionError: RDMA WRITE work request" in str(target_error)


def test_when_both_fail_each_raises_its_own_error_noting_the_peers(fake_device, monkeypatch):
    def context(name):
        raise PyverbsRDMAError(f"Failed to find device {name} on rank {THREAD.rank}")

    monkeypatch.setattr(pv, "Context", context)
    (_, error0), (_, error1) = with_link(64, lambda link: None)
    assert str(error0) == "cannot open RDMA device fake0: Failed to find device fake0 on rank 0"
    if hasattr(error0, "add_note"):
        assert error0.__notes__ == ["the peer (pair rank 1) failed too: VerbsError: " + str(error1)]


def test_setup_failure_on_one_rank_fails_both(fake_device, monkeypatch):
    real_context = pv.Context

    def context(name):
        if THREAD.rank == 1:
            raise PyverbsRDMAError("Failed to find device fake0")
        return real_context(name)

    monkeypatch.setattr(pv, "Context", context)
    (_, error0), (_, error1) = with_link(64, lambda link: None)
    assert isinstance(error0, verr.VerbsError) and isinstance(error1, verr.VerbsError)
    assert str(error1) == "cannot open RDMA device fake0: Failed to find device fake0"
    assert str(error0) == "the peer (pair rank 1) failed: VerbsError: " + str(error1)
    assert not fake_device.mrs


def test_roce_pair_picks_the_roce_v2_gid_and_runs(fake_device):
    fake_device.link_layers = {0: ETH, 1: ETH}

    def body(link):
        return link.local, link.put_latency(8, 5, 1, 0).times_ns

    (local0, samples), (local1, none) = no_errors(with_link(64, body))
    assert local0.gid_index == local1.gid_index == 3 and local0.gid != local1.gid
    assert len(samples) == 5 and none is None


def test_link_layers_must_match(fake_device):
    fake_device.link_layers = {0: IB, 1: ETH}
    errors = [exc for _, exc in with_link(64, lambda link: None)]
    assert all(isinstance(x, verr.VerbsError) for x in errors)
    assert "is InfiniBand but the peer's fake0" in str(errors[0]) and "is Ethernet but" in str(errors[1])


def test_pair_link_argument_checks(fake_device):
    def body(link):
        with pytest.raises(ValueError, match="origin"):
            link.put_latency(8, 1, 0, 2)
        with pytest.raises(ValueError, match="size 65 B outside 1..64 B"):
            link.read_latency(65, 1, 0, 0)
        return True

    assert no_errors(with_link(64, body)) == [True, True]


def test_pair_link_needs_two_ranks():
    with pytest.raises(ValueError, match="2 ranks"):
        vlink.PairLink(SimpleNamespace(Get_size=lambda: 1), 8, config=vdev.Config("mlx5_0", vdev.Settings()))


def test_memlock_effect_lowers_the_limit_for_one_registration_and_restores_it(recording_device, monkeypatch):
    before = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    seen = []

    def mr_like_the_kernel(pd, length, access, address):
        # The kernel refuses to pin more than the soft limit (for a process without CAP_IPC_LOCK).
        seen.append(resource.getrlimit(resource.RLIMIT_MEMLOCK)[0])
        if length > seen[-1]:
            raise PyverbsRDMAError("Failed to register a MR", errno.ENOMEM)
        return RecordingMR(recording_device, pd, length, access, address)

    monkeypatch.setattr(pv, "MR", mr_like_the_kernel)
    enforced, what = ENGINE.memlock_effect(1 << 20)
    assert enforced and seen == [1 << 19]
    assert "ulimit -l) is currently 524288 bytes" in what and "unlimited" in what
    assert resource.getrlimit(resource.RLIMIT_MEMLOCK) == before
    # A process the limit does not bind (CAP_IPC_LOCK): registration succeeds, and the text says why.
    monkeypatch.setattr(pv, "MR", lambda pd, length, access, address: RecordingMR(
        recording_device, pd, length, access, address))
    enforced, what = ENGINE.memlock_effect(1 << 20)
    assert not enforced and "CAP_IPC_LOCK" in what
    assert resource.getrlimit(resource.RLIMIT_MEMLOCK) == before


class _GpuArray:
    """A stand-in cupy array: only .data.ptr and .nbytes are read by the registration path."""

    def __init__(self, ptr, nbytes):
        self.data, self.nbytes = SimpleNamespace(ptr=ptr), nbytes


@pytest.mark.parametrize("dmabuf", [True, False])
def test_gpu_memory_registers_by_dmabuf_else_by_address(monkeypatch, dmabuf):
    """dma-buf: the MR's IOVA is the dma-buf offset (0) and the fd is closed with the link;
    without it, the CUDA pointer itself is registered (nvidia_peermem)."""
    gpu = gpumem.GpuBuffer(memory=None, ptr=0x7F0000000000, size=2 << 20)
    made = []
    read_fd, write_fd = os.pipe()
    os.close(write_fd)

    def export(buf):
        if not dmabuf:
            raise gpumem.GpuMemError("cuMemGetHandleForAddressRange -> CUDA_ERROR_NOT_SUPPORTED")
        return read_fd

    monkeypatch.setattr(gpumem, "export_dmabuf", export)
    monkeypatch.setattr(pv, "DmaBufMR", lambda pd, length, access, dmabuf, offset: made.append(
        ("dmabuf", length, dmabuf, offset)) or SimpleNamespace(lkey=1, rkey=2, close=lambda: None))
    monkeypatch.setattr(pv, "MR", lambda pd, length, access, address: made.append(
        ("address", length, address)) or SimpleNamespace(lkey=1, rkey=2, close=lambda: None))
    link = vlink.PairLink.__new__(vlink.PairLink)
    link.pd, link.device = None, "mlx5_0"
    link._gpu, link._iova, link._fds, link._mrs = [gpu], {}, [], []
    buf = _GpuArray(gpu.ptr, 4096)
    link._mr(buf, "IBV_ACCESS_LOCAL_WRITE", "IBV_ACCESS_REMOTE_WRITE")
    if dmabuf:
        assert made == [("dmabuf", 2 << 20, read_fd, 0)] and link._addr(buf) == 0
        assert link.gpu_path == "dma-buf" and link._fds == [read_fd]
        os.close(read_fd)
    else:
        os.close(read_fd)
        assert made == [("address", 2 << 20, gpu.ptr)] and link._addr(buf) == gpu.ptr
        assert link.gpu_path == "nvidia_peermem" and link._fds == []
    host = memory.allocate(64)
    assert link._addr(host) == host.ctypes.data
