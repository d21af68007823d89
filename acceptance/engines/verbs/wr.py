"""Work requests (write, write-with-immediate, read, atomic, send, receive), the posting window, and
waiting for completions or for the peer."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable

from . import binding as pv
from .errors import VerbsError, check_completion


INLINE_WRITE = 220          # DEF_INLINE_WRITE: writes and sends up to this size go inline
POLL_BATCH = 16             # completions taken per poll
SPIN_TIMEOUT_S = 30.0       # a wait for the peer or a completion gives up after this long



def sge(addr: int, length: int, lkey: int):
    return pv.SGE(addr, length, lkey)


def send_flags(signaled: bool, inline: bool = False) -> int:
    flags = 0
    if signaled:
        flags |= pv.e.ibv_send_flags.IBV_SEND_SIGNALED
    if inline:
        flags |= pv.e.ibv_send_flags.IBV_SEND_INLINE
    return int(flags)


def send_request(opcode_name: str, wr_id: int, sg, flags: int, imm_data: int = 0):
    return pv.SendWR(wr_id=wr_id, opcode=getattr(pv.e.ibv_wr_opcode, opcode_name), num_sge=1, sg=[sg],
                  send_flags=flags, imm_data=imm_data)


def write_wr(wr_id: int, sg, rkey: int, remote_addr: int, signaled: bool = True, inline: bool = False):
    """RDMA WRITE of the SGE to (remote_addr, rkey)."""
    wr = send_request("IBV_WR_RDMA_WRITE", wr_id, sg, send_flags(signaled, inline))
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def write_imm_wr(wr_id: int, sg, rkey: int, remote_addr: int, imm: int, signaled: bool = True,
                 inline: bool = False):
    """RDMA WRITE_WITH_IMM: the immediate (host order here) goes on the wire in network order."""
    wr = send_request("IBV_WR_RDMA_WRITE_WITH_IMM", wr_id, sg, send_flags(signaled, inline), socket.htonl(imm))
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def read_wr(wr_id: int, sg, rkey: int, remote_addr: int, signaled: bool = True):
    """RDMA READ of (remote_addr, rkey) into the SGE (whose MR needs LOCAL_WRITE)."""
    wr = send_request("IBV_WR_RDMA_READ", wr_id, sg, send_flags(signaled))
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def atomic_faa_wr(wr_id: int, sg, rkey: int, remote_addr: int, add: int = 1, signaled: bool = True):
    """ATOMIC_FETCH_AND_ADD of `add` (the compare_add operand) on the remote 8 bytes; the old value lands in sg."""
    wr = send_request("IBV_WR_ATOMIC_FETCH_AND_ADD", wr_id, sg, send_flags(signaled))
    wr.set_wr_atomic(rkey, remote_addr, add, 0)
    return wr


def send_wr(wr_id: int, sg, signaled: bool = True, inline: bool = False):
    return send_request("IBV_WR_SEND", wr_id, sg, send_flags(signaled, inline))


def recv_wr(wr_id: int, sg):
    return pv.RecvWR(wr_id=wr_id, num_sge=1, sg=[sg])



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
            timeout_s: float = SPIN_TIMEOUT_S, relax: Callable[[], None] | None = None) -> None:
        """Post all `total` WRs with post(index, signaled) and wait until every one completed.

        poll() returns the wr_ids of the signaled completions it found (possibly none),
        having checked their status. relax() runs after an empty poll (Config.relax).
        """
        self.reset()
        spins, deadline = 0, None
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
                    deadline = check_deadline(deadline, timeout_s, lambda: (
                        f"{self.in_flight} work requests got no completion in {timeout_s:g} s "
                        f"({self.completed} of {self.total} completed)"))


def check_deadline(deadline: float | None, timeout_s: float, what: Callable[[], str]) -> float:
    now = time.monotonic()
    if deadline is None:
        return now + timeout_s
    if now > deadline:
        raise VerbsError(what())
    return deadline


def wait_completion(cq, what: str | None = None, timeout_s: float = SPIN_TIMEOUT_S,
                    relax: Callable[[], None] | None = None):
    """Spin until `cq` yields one completion, check it and return it; relax() after an empty poll."""
    poll = cq.poll
    spins, deadline = 0, None
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
            deadline = check_deadline(deadline, timeout_s, lambda: (
                f"no completion for the {what or 'posted'} work request in {timeout_s:g} s"))


def spin_until(mem: memoryview, index: int, value: int, timeout_s: float = SPIN_TIMEOUT_S,
               relax: Callable[[], None] | None = None) -> None:
    """Spin until byte `index` of mem equals `value` (the peer's RDMA WRITE arrived)."""
    spins, deadline = 0, None
    while mem[index] != value:
        spins += 1
        if relax:
            relax()
        if not spins & 0xFFFF:
            deadline = check_deadline(deadline, timeout_s, lambda: (
                f"no RDMA WRITE from the peer in {timeout_s:g} s: the last byte of the receive buffer "
                f"stayed {mem[index]}, expected {value}"))
