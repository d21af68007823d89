"""The xid check: NVIDIA Xid events (and a GPU fallen off the bus) in the kernel log since the last
check, each looked up in NVIDIA's catalog for its action (acceptance.host.xid). One calling for a GPU
reset, a reboot or an RMA keeps failing the check until the node rebooted (a new boot id) or an operator
says it was dealt with (`node-check --forget xid`): a log line seen once must not be forgotten at the next
check. A drain-level event fails once."""

from __future__ import annotations

from ..host import nodefacts
from ..host import xid
from .base import Context, Outcome, Problem, error, judged, skip

STICKY = ("reset_gpu", "reboot", "rma")  # what a later quiet log does not undo


def check(ctx: Context, text: str | None = None, boot_id: str | None = None) -> Outcome:
    if not nodefacts.gpu_count(ctx.root):
        return skip("xid", "no NVIDIA GPU on this node")
    boot_id = xid.read_boot_id() if boot_id is None else boot_id
    cursor = xid.Cursor.loads(ctx.previous.get("cursor", ""))
    try:
        text = xid.read_kernel_log() if text is None else text
    except xid.KernelLogError as e:
        return error("xid", f"kernel log unreadable: {e}")
    events, cursor = xid.new_events(text, cursor, boot_id)
    pending = [p for p in ctx.previous.get("pending", []) if p.get("boot_id") == boot_id or not boot_id]
    for e in events:
        if e.action in STICKY or e.action == "drain":
            pending.append({"boot_id": boot_id, "pci": e.pci, "code": e.code, "action": e.action,
                            "line": xid.summarize([e]).lines[0], "sticky": e.action in STICKY})
    problems = [Problem(f"GPU {p['pci']}", p["line"].split(": ", 1)[1] if ": " in p["line"] else p["line"],
                        action=p["action"]) for p in pending]
    state = {"cursor": cursor.dumps(), "pending": [p for p in pending if p["sticky"]]}
    seen = f"{len(events)} new Xid events" if events else "no new Xid events"
    return judged("xid", problems, seen, state)
