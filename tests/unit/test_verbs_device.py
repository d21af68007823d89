"""The verbs engine on a real RDMA device: skipped, with available()'s reason, where there is none.

`make test` runs it on Soft-RoCE devices inside the QEMU guest of tests/cluster/softroce.py
(tests/cluster/test_softroce.py); on a host with a NIC it runs as it is.

MPI-free: the smoke test opens a context, PD, MR, CQ and QP and moves the QP to INIT; the
loopback test runs a whole PairLink between two threads of this process, both on the first
ACTIVE port of this host (the NIC loops the traffic back), so every method runs against the
hardware without a second node.
"""

import sys
from pathlib import Path

import pytest

pytest.importorskip("pyverbs.device", reason="pyverbs (rdma-core's Python bindings, Debian python3-pyverbs) "
                    "does not import: run `make pyverbs` to link the distribution's package into the venv")

from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.qp import QP

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from threadpair import run_pair  # noqa: E402

from acceptance.engines import memory, verbs
from acceptance.engines.verbs import device as vdev
from acceptance.engines.verbs import link as vlink
from acceptance.engines.verbs import memreg as vmr
from acceptance.engines.verbs import qp as vqp
from acceptance.engines.verbs import wr as vwr
from acceptance.engines.verbs.binding import e

USABLE, WHY = verbs.available()
pytestmark = pytest.mark.skipif(not USABLE, reason=f"no usable RDMA device: {WHY}")

# The engine the tests drive: each test sets its config (monkeypatch), as configure() would.
ENGINE = verbs.VerbsEngine()


def active_port() -> tuple[str, int]:
    """(device, port) of the first ACTIVE port on this host."""
    for name in vdev.device_names():
        with Context(name=name) as ctx:
            for port in range(1, ctx.query_device().phys_port_cnt + 1):
                if ctx.query_port(port).state == e.ibv_port_state.IBV_PORT_ACTIVE:
                    return name, port
    pytest.skip(f"no ACTIVE port: {WHY}")


@pytest.fixture
def configured(monkeypatch):
    name, port = active_port()
    monkeypatch.setattr(ENGINE, "config", vdev.Config(name, vdev.Settings(port=port, tx_depth=32, cq_mod=8)))
    monkeypatch.delenv(memory.FLIP_ENV, raising=False)
    return name, port


def test_context_pd_mr_cq_qp_to_init(configured):
    name, port = configured
    with Context(name=name) as ctx:
        attr = ctx.query_port(port)
        if attr.link_layer == e.IBV_LINK_LAYER_ETHERNET:
            gid_index = vqp.choose_gid_index(vqp.read_gid_rows(ctx, port, attr.gid_tbl_len))
        else:
            gid_index = 0
        gid = str(ctx.query_gid(port, gid_index))
        pd = PD(ctx)
        buf = memory.allocate(1 << 16)
        mr = vmr.register(pd, buf, vmr.access_flags(*vmr.REG_ACCESS_NAMES))
        vmr.check_keys(mr, buf.nbytes)
        assert mr.buf == buf.ctypes.data and mr.length == buf.nbytes
        cq = CQ(ctx, 33)
        qp = QP(pd, vqp.qp_init_attr(cq, cq, 32, 16, 0))
        assert qp.qp_state == e.ibv_qp_state.IBV_QPS_RESET
        me = vqp.Endpoint(qp_num=qp.qp_num, psn=1, lid=attr.lid, gid=gid, gid_index=gid_index,
                            mtu=int(attr.active_mtu), link_layer=int(attr.link_layer), rkey=mr.rkey,
                            addr=buf.ctypes.data, length=buf.nbytes, atomic_rkey=mr.rkey,
                            atomic_addr=buf.ctypes.data, max_rd_atomic=1)
        state, init, mask = vqp.transition_attrs(me, me, vdev.Settings(port=port))[0]
        qp.modify(init, mask)
        assert state == "INIT" and qp.qp_state == e.ibv_qp_state.IBV_QPS_INIT
        qp.close()
        cq.close()
        mr.close()
        pd.close()


def test_registration_on_the_device(configured):
    for how in ("allocate", "create"):
        reg, dereg = ENGINE.register_times(1 << 20, 3, how)
        assert len(reg) == len(dereg) == 3 and (reg > 0).all() and (dereg > 0).all()
    assert ENGINE.registration_growth(1 << 20, 10) < 16 << 20


def test_loopback_pair_link(configured):
    def rank(comm):
        link = ENGINE.PairLink(comm, 1 << 16)
        try:
            return {
                "write": [link.put_bandwidth(size, 3, 1, 16, 0, (0, 1, size)) for size in (8, 4096, 1 << 16)],
                "read": link.read_bandwidth(1 << 16, 3, 1, 16, 1, (1, 0, 0)),
                "put_lat": link.put_latency(8, 50, 5, 0),
                "send_lat": link.pingpong_latency(8, 50, 5, 0),
                "imm_lat": link.write_imm_latency(8, 50, 5, 1),
                "read_lat": link.read_latency(8, 50, 5, 1),
                "atomic": link.atomic_latency(50, 5, 0),
            }
        finally:
            link.free()

    (r0, e0), (r1, e1) = run_pair(rank)
    assert e0 is None and e1 is None, (e0, e1)
    for t0, t1 in zip(r0["write"], r1["write"]):
        assert len(t0.times_ns) == 3 and t0.tally is None and t1.tally.ops > 0 and not t1.tally.failed
    assert len(r1["read"].times_ns) == 3 and r1["read"].tally.ops > 0 and not r1["read"].tally.failed
    for key, origin in (("put_lat", r0), ("send_lat", r0), ("imm_lat", r1), ("read_lat", r1)):
        times = getattr(origin[key], "times_ns", origin[key])
        assert len(times) == 50 and (times > 0).all(), key
    assert not r1["read_lat"].tally.failed and r1["read_lat"].tally.ops == 50
    assert len(r0["atomic"].times_ns) == 50 and not r0["atomic"].tally.failed and not r1["atomic"].tally.failed


@pytest.mark.parametrize("mode", ["drop", "half", "shifted"])
def test_faulty_work_requests_fail_the_checks_on_the_device(configured, monkeypatch, mode):
    """Mutation at the engine boundary on real hardware: every second slot's work request moves
    nothing (a zero-length SGE), half of its bytes, or bytes from one place off, and every second
    fetch-and-add returns its value into the wrong slot; the target of the writes and the origin of
    the reads and atomics must count those as failed."""
    real, calls, fetches = vwr.sge, [0], [0]

    def faulty(addr, length, lkey):
        if length == 8:  # a fetched value's slot: every second add returns into the slot before
            fetches[0] += 1
            return real(addr - 8 if fetches[0] % 2 == 0 else addr, length, lkey)
        calls[0] += 1
        if calls[0] % 2 == 0:  # the slots' SGEs
            addr, length = {"drop": (addr, 0), "half": (addr, length // 2), "shifted": (addr + 1, length - 1)}[mode]
        return real(addr, length, lkey)

    def rank(comm):
        link = ENGINE.PairLink(comm, 1 << 16)
        monkeypatch.setattr(vlink, "sge", faulty)  # after the link's own receive SGE
        try:
            return (link.put_bandwidth(4096, 3, 1, 8, 0, (0, 1, 1)), link.read_bandwidth(4096, 3, 1, 8, 1, (1, 0, 2)),
                    link.atomic_latency(20, 2, 1))
        finally:
            link.free()

    (r0, e0), (r1, e1) = run_pair(rank)
    assert e0 is None and e1 is None, (e0, e1)
    atomic = r1[2].tally  # the origin's: every second fetched slot never got its value
    assert atomic.ops == 20 and atomic.failed >= 10 and atomic.missing >= 1, atomic
    for tally in (r1[0].tally, r1[1].tally):
        assert tally.ops > 0 and tally.failed > 0 and tally.wrong > 0, tally
        if mode == "drop":
            assert tally.missing == tally.failed
