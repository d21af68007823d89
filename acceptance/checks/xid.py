"""The xid check: NVIDIA Xid events (and a GPU fallen off the bus) in the kernel log since the last
check, each looked up in NVIDIA's catalog for its action (acceptance.host.xid). One calling for a GPU
reset, a reboot or an RMA keeps failing the check until the node rebooted (a new boot id) or an operator
says it was dealt with (`node-check --forget xid`): a log line seen once must not be forgotten at the next
check. A drain-level event fails once."""

from __future__ import annotations

from ..host import kernellog, nodefacts, xid
from .base import Context, Outcome, Problem, error, judged, skip

STICKY = ("reset_gpu", "reboot", "rma")  # what a later quiet log does not undo


def check(ctx: Context, text: str | None = None, boot_id: str | None = None) -> Outcome:
    if not nodefacts.gpu_count(ctx.root):
        return skip("xid", "no NVIDIA GPU on this node")
    boot_id = kernellog.read_boot_id() if boot_id is None else boot_id
    cursor = xid.Cursor.loads(ctx.previous.get("cursor", ""))
    try:
        text = kernellog.read_kernel_log() if text is None else text
    except kernellog.KernelLogError as e:
        return error("xid", f"kernel log unreadable: {e}")
    events, cursor = xid.new_events(text, cursor, boot_id)
    pending = [p for p in ctx.previous.get("pending", []) if p.get("boot_id") == boot_id or not boot_id]
    for e in events:
        if e.action in STICKY or e.action == "drain":
            entry = {"boot_id": boot_id, "pci": e.pci, "code": e.code, "action": e.action,
                     "detail": f"{e.label}: {', '.join(xid.STEPS[e.action])}", "sticky": e.action in STICKY}
            # One entry per GPU, event and action: a message the driver repeats (RmInitAdapter at every
            # open) is one problem, not a list that grows at every check.
            if not any(_same(entry, p) for p in pending):
                pending.append(entry)
    # A state written before the detail was kept as a field holds the summary line ("line"): shown as it is.
    problems = [Problem(f"GPU {p['pci']}", p.get("detail") or p.get("line", ""), action=p["action"]) for p in pending]
    state = {"cursor": cursor.dumps(), "pending": [p for p in pending if p["sticky"]]}
    seen = f"{len(events)} new GPU driver events (Xid and lost GPUs)" if events else "no new Xid events"
    return judged("xid", problems, seen, state)


def _same(a: dict, b: dict) -> bool:
    return (a["pci"], a["code"], a["action"], a["detail"]) == (b["pci"], b.get("code"), b["action"], b.get("detail"))
