"""PCIe links as trained: each RDMA NIC's and GPU's link speed and width against what it and its
upstream port can do (no pytest, no MPI).

A NIC whose link trained to x8 instead of x16, or Gen4 instead of Gen5, moves half its data and
passes every check that does not load it to line rate; here it is named from sysfs alone.

Sources (the kernel's PCI sysfs ABI, Documentation/ABI/testing/sysfs-bus-pci):
- <root>/bus/pci/devices/<bdf>/{current_link_speed,current_link_width,max_link_speed,max_link_width}:
  the speed as "32.0 GT/s PCIe" (older kernels "8 GT/s", "Unknown" when the link is down), the
  width as a lane count.
- The upstream port is the device's parent in the /sys/devices tree; its max_link_* bound what the
  link can train to (a Gen5 NIC in a Gen4 slot trains at Gen4, correctly).
- GPUs lower their link speed when idle to save power (nvidia-smi(1), "PCI > GPU Link Info": the
  current generation and width "may be reduced when the GPU is not in use"), so a GPU's speed is
  information only; its width is judged, as a NIC's speed and width are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .sysfs import read_sysfs

_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")


def parse_speed(text: str | None) -> float | None:
    """GT/s from "32.0 GT/s PCIe" or "8 GT/s"; None for "Unknown", a missing file or anything else."""
    m = _SPEED.match(text or "")
    return float(m.group(1)) if m else None


def parse_width(text: str | None) -> int | None:
    """Lanes from "16" (or "x16"); None when unknown (0 is a link that is down: no lanes)."""
    text = (text or "").strip().lower().removeprefix("x")
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class Link:
    """One PCIe function's link: now, and the most it and its upstream port can train to."""
    name: str                 # the RDMA device (mlx5_0) or, for a GPU, its PCI address
    kind: str                 # "nic" | "gpu"
    bdf: str
    speed: float | None       # GT/s now
    width: int | None         # lanes now
    max_speed: float | None   # GT/s: the lower of the device's and its upstream port's maximum
    max_width: int | None

    def short(self) -> list[str]:
        """What is below its maximum, e.g. ["x8 of x16", "16 GT/s of 32 GT/s"] (the speed not for GPUs)."""
        out = []
        if self.width is not None and self.max_width is not None and self.width < self.max_width:
            out.append(f"x{self.width} of x{self.max_width}")
        if (self.kind != "gpu" and self.speed is not None and self.max_speed is not None
                and self.speed < self.max_speed):
            out.append(f"{self.speed:g} GT/s of {self.max_speed:g} GT/s")
        return out

    @property
    def part(self) -> str:
        """ "NIC mlx5_0 (0000:18:00.0)" or "GPU 0000:19:00.0"."""
        return f"GPU {self.name}" if self.kind == "gpu" else f"NIC {self.name} ({self.bdf})"

    def describe(self) -> str:
        """ "PCIe link trained to x8 at 32 GT/s, can train to x16 at 32 GT/s (x8 of x16)"; "" when not short."""
        short = self.short()
        if not short:
            return ""
        now, most = _shape(self.width, self.speed), _shape(self.max_width, self.max_speed)
        return f"PCIe link trained to {now}, can train to {most} ({', '.join(short)})"


def _lower(a, b):
    return b if a is None else a if b is None else min(a, b)


def read_link(pci: Path, name: str, kind: str) -> Link | None:
    """The link of the PCI function at `pci` (a /sys/bus/pci/devices/<bdf> path or its target);
    None when it has no PCIe link files (a virtual or conventional PCI device)."""
    pci = pci.resolve()
    speed, width = read_sysfs(pci / "current_link_speed"), read_sysfs(pci / "current_link_width")
    if speed is None and width is None:
        return None
    up = pci.parent
    return Link(name=name, kind=kind, bdf=pci.name, speed=parse_speed(speed), width=parse_width(width),
                max_speed=_lower(parse_speed(read_sysfs(pci / "max_link_speed")),
                                 parse_speed(read_sysfs(up / "max_link_speed"))),
                max_width=_lower(parse_width(read_sysfs(pci / "max_link_width")),
                                 parse_width(read_sysfs(up / "max_link_width"))))


def links(root: Path, nics: list[str], gpus: list[str]) -> list[Link]:
    """The links of these RDMA devices (by name, through <root>/class/infiniband/<dev>/device) and
    GPUs (by PCI address); devices without PCIe link files (Soft-RoCE, a VM's virtual functions)
    are left out."""
    root = Path(root)
    out = []
    for dev in nics:
        pci = root / "class" / "infiniband" / dev / "device"
        if pci.exists():
            link = read_link(pci, dev, "nic")
            if link is not None:
                out.append(link)
    for bdf in gpus:
        link = read_link(root / "bus" / "pci" / "devices" / bdf, bdf, "gpu")
        if link is not None:
            out.append(link)
    return out


def trained_down(found: list[Link]) -> list[str]:
    """One line per link below what it can train to, naming the device and both values."""
    return [f"{link.part}: {link.describe()}" for link in found if link.short()]


def _shape(width: int | None, speed: float | None) -> str:
    return " at ".join([*([f"x{width}"] if width is not None else []), *([f"{speed:g} GT/s"] if speed is not None else [])])
