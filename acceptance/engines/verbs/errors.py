"""What goes wrong in verbs, in words: VerbsError, and a work completion's error status with its likely cause."""

from __future__ import annotations

from . import binding as pv


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



def enum_name(enum_class: str, value: int) -> str:
    """The member name of `value` in pyverbs' enum class (e.g. IBV_WC_RETRY_EXC_ERR), or "<class> <value>"."""
    cls = getattr(pv.e, enum_class, None)
    if cls is not None:
        try:
            return cls(int(value)).name
        except (ValueError, TypeError, AttributeError):
            pass
    return f"{enum_class} {int(value)}"


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
    if wc.status != pv.e.ibv_wc_status.IBV_WC_SUCCESS:
        raise CompletionError(wc, what)
