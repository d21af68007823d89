"""The pcie check: each rail NIC's and GPU's PCIe link at the width (and, for a NIC, the speed) it and
its slot can train to (acceptance.host.pcie)."""

from __future__ import annotations

from ..host import nodefacts
from .base import Context, Outcome, Problem, judged, skip
from .ports import rail_ports


def check(ctx: Context) -> Outcome:
    try:
        _, rails = rail_ports(ctx)
        devices = sorted({p.device for p in rails.ports})
    except nodefacts.Unavailable:
        devices = []  # no RDMA device: the GPUs' links are still checked
    try:
        links = nodefacts.pcie_links(ctx.root, devices)
    except nodefacts.Unavailable as e:
        return skip("pcie", e.reason)
    if not links:
        return skip("pcie", "no RDMA NIC or NVIDIA GPU with a PCIe link in sysfs")
    return judged("pcie", [Problem(link.part, link.describe()) for link in links if link.short()],
                  f"{len(links)} links")
