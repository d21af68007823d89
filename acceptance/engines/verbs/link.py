"""PairLink: one RC queue pair between two ranks and every operation the drivers time on it."""

from __future__ import annotations

import contextlib
import numpy as np
import os
import random
import socket
from collections.abc import Callable

from ...measure import Tally, timed, timed_capped, timed_sequence
from ...measure.verify import Policy, Slots, WriteCheck, batched, planned_batches
from .. import gpumem
from ..memory import allocate, counter_tally, fetched_tally, fill_pattern, poison, slot_tally
from ..contract import Transfer
from . import binding as pv
from .device import Config, link_layer_name, open_context, port_state_name
from .errors import VerbsError, check_completion, enum_name
from .memreg import access_flags, check_keys, gc_off, register, register_gpu
from .qp import Endpoint, RX_DEPTH, choose_gid_index, gid_is_zero, mtu_bytes, path_mtu, qp_init_attr, read_gid_rows, transition_attrs
from .wr import (INLINE_WRITE, POLL_BATCH, Window, atomic_faa_wr, read_wr, recv_wr, send_wr, sge, spin_until,
                 wait_completion, write_imm_wr, write_wr)


MAX_SLOTS = 1024            # distinct slots (prebuilt WRs) of one verified batch


def device_ptr(buf) -> int | None:
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

    def __init__(self, comm, max_size: int, slot_bytes: int = 0, memory: str = "host", *, config: Config):
        """slot_bytes: buffer memory for the distinct slots of windowed writes and reads, and of the
        fetched values of atomics (at least max_size); config: the engine's (device, settings)."""
        if comm.Get_size() != 2:
            raise ValueError(f"a PairLink needs a communicator of 2 ranks, got {comm.Get_size()}")
        if memory not in ("host", "cuda"):
            raise ValueError(f"memory must be 'host' or 'cuda', got {memory!r}")
        self.memory = memory  # cuda: the written and read buffers are GPU memory (GPUDirect RDMA)
        self.device, self.settings, self.relax = config.device, config.settings, config.relax
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
        self.ctx = open_context(self.device)
        dev_attr = self.ctx.query_device()
        port = self.ctx.query_port(s.port)
        if port.state != pv.e.ibv_port_state.IBV_PORT_ACTIVE:
            raise VerbsError(f"{self.device} port {s.port} is {port_state_name(port.state)}, not ACTIVE "
                             f"(ibv_devinfo -d {self.device}: a cable, switch or subnet manager problem)")
        if port.link_layer == pv.e.IBV_LINK_LAYER_ETHERNET:
            gid_index = s.gid_index if s.gid_index >= 0 else choose_gid_index(
                read_gid_rows(self.ctx, s.port, port.gid_tbl_len))
        else:
            gid_index = max(s.gid_index, 0)
        gid = str(self.ctx.query_gid(s.port, gid_index))
        if port.link_layer == pv.e.IBV_LINK_LAYER_ETHERNET and gid_is_zero(gid):
            raise VerbsError(f"{self.device} port {s.port}: GID index {gid_index} is empty "
                             "([verbs] gid_index; show_gids lists the populated ones)")
        self.pd = pv.PD(self.ctx)
        self.scq = pv.CQ(self.ctx, s.tx_depth + 1)
        self.rcq = pv.CQ(self.ctx, RX_DEPTH + 1)
        try:
            self.qp = pv.QP(self.pd, qp_init_attr(self.scq, self.rcq, s.tx_depth, RX_DEPTH, INLINE_WRITE))
            self.max_inline = INLINE_WRITE
        except pv.PyverbsError:  # a device without inline sends: no inline then
            try:
                self.qp = pv.QP(self.pd, qp_init_attr(self.scq, self.rcq, s.tx_depth, RX_DEPTH, 0))
            except pv.PyverbsError as exc:
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
        atomics = dev_attr.atomic_caps != pv.e.ibv_atomic_cap.IBV_ATOMIC_NONE
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
            except pv.PyverbsError as exc:
                mtu = mtu_bytes(path_mtu(self.local.mtu, self.remote.mtu))
                raise VerbsError(f"{self.device} port {self.settings.port}: moving the QP to {state} failed: "
                                 f"{exc} (peer {self.remote.device} on {self.remote.host}, GID index "
                                 f"{self.local.gid_index}, path MTU {mtu} B)") from exc
        for _ in range(RX_DEPTH):
            self.qp.post_recv(self._recv)

    def _mr(self, buf, *access: str):
        gpu = next((g for g in self._gpu if g.ptr == device_ptr(buf)), None)
        mr = register(self.pd, buf, access_flags(*access)) if gpu is None else self._gpu_mr(buf, gpu, *access)
        self._mrs.append(mr)
        check_keys(mr, buf.nbytes, remote=any(a.startswith("IBV_ACCESS_REMOTE_") for a in access))
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

        return lambda: win.run(post, poll, relax=self.relax)

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
                with gc_off():
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
            return lambda: win.run(post, poll, relax=self.relax)
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

    # -- one side alone: for a group of links (acceptance.engines.verbs.incast), no pair step

    def write_window(self, stack: contextlib.ExitStack, size: int, per: int, window: int) -> Callable[[], None]:
        """An op that posts `window` RDMA WRITEs of `size` B from the first `per` slots of local_buf to
        the same slots at the start of the peer's window (WR j to slot j % per), at most tx_depth in
        flight and one completion every cq_mod (ib_write_bw), and returns once every one is
        acknowledged. Only this side acts (the peer's CPU takes no part, nor a collective call); the
        work requests live until `stack` closes."""
        limit = min(self.max_size, self.remote.length)
        if size < 1 or per < 1 or window < 1 or per * size > limit:
            raise ValueError(f"{per} slots of {size} B outside the link's {limit} B (window {window})")
        slots = Slots(size, per, 1, window)
        r, inline = self.remote, self._inline(size) and self.memory == "host"  # inline: the CPU reads the bytes
        wrs = self._slot_wrs(stack, lambda sg, addr, sig: write_wr(0, sg, r.rkey, addr, sig, inline),
                             slots, self.local_buf, r.addr, self.local_mr)
        return self._slot_op_at(wrs, slots, window, "RDMA WRITE")(0)

    def write_probe(self, stack: contextlib.ExitStack, size: int) -> Callable[[], None]:
        """An op that posts one signaled RDMA WRITE of `size` B from local_buf to the start of the peer's
        window and polls it to its completion (the responder's ACK): a full round trip, as the GPU
        write latency's sample. Only this side acts; the work request lives until `stack` closes."""
        limit = min(self.max_size, self.remote.length)
        if not 1 <= size <= limit:
            raise ValueError(f"size {size} B outside 1..{limit} B (the link's max_size)")
        sg = self._sge(stack, self.local_buf, size, self.local_mr)
        inline = self._inline(size) and self.memory == "host"  # inline: the CPU reads the bytes
        wr = stack.enter_context(write_wr(0, sg, self.remote.rkey, self.remote.addr, True, inline))
        post, scq, relax = self.qp.post_send, self.scq, self.relax

        def op() -> None:
            post(wr)
            wait_completion(scq, "RDMA WRITE", relax=relax)
        return op

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
                wait_completion(scq, "RDMA WRITE", relax=self.relax)

            def origin_op() -> None:
                nonlocal count
                count = (count + 1) & 0xFF
                send(count)
                spin_until(incoming, last, count, relax=self.relax)

            def target_op() -> None:
                nonlocal count
                count = (count + 1) & 0xFF
                spin_until(incoming, last, count, relax=self.relax)
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
                wait_completion(scq, "RDMA WRITE", relax=self.relax)

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
                wait_completion(scq, "SEND", relax=self.relax)

            def receive() -> None:
                wc = wait_completion(rcq, "receive", relax=self.relax)
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
            with_imm = pv.e.ibv_wc_opcode.IBV_WC_RECV_RDMA_WITH_IMM
            count = 0

            def send(value: int) -> None:
                wr.imm_data = socket.htonl(value)
                post(wr)
                wait_completion(scq, "RDMA WRITE_WITH_IMM", relax=self.relax)

            def receive(value: int) -> None:
                wc = wait_completion(rcq, "receive", relax=self.relax)
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
                        wait_completion(scq, "RDMA READ", relax=self.relax)
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
                        wait_completion(scq, "ATOMIC_FETCH_AND_ADD", relax=self.relax)
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
