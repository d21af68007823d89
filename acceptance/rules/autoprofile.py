"""`--profile auto`: the built-in profile that matches this node's GPUs and RDMA ports.

A built-in names its hardware with [detect] gpu_model (a part of nvidia-smi's GPU name,
e.g. "H100"), preflight.port_rate (the active rate of its RDMA ports) and preflight.link_layer
(InfiniBand or Ethernet: NDR and 400 GbE RoCE ports run at the same rate). The node is read
once (nvidia-smi --query-gpu=name, sysfs port rates), on the node that launches the job,
and exactly one built-in must match. When none does, it is an error (exit 2) saying what the node
has and what each built-in expects: a node whose ports trained down or whose GPU driver is broken
matches none, and is exactly the node that must not be judged by the lenient `fleet` built-in, which
is used only when named. When several match, the operator must name one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..host import nodefacts
from ..host.sysfs import sysfs_root
from .profile import Profile, ProfileError, builtin_names, load_profile


@dataclass(frozen=True)
class Hardware:
    gpus: list[str]            # nvidia-smi names, one per GPU
    gpu_why: str               # why none, when none
    port_gbps: float | None    # the most common rate of the ACTIVE RDMA ports
    port_why: str
    link_layer: str | None = None  # the most common link layer of those ports

    def describe(self) -> str:
        if self.gpus:
            common, n = Counter(self.gpus).most_common(1)[0]
            gpus = f"{n}x {common}"
        else:
            gpus = f"no GPU ({self.gpu_why})"
        ports = (f"{self.link_layer + ' ' if self.link_layer else ''}RDMA ports at {self.port_gbps:g} Gbit/s"
                 if self.port_gbps else f"no RDMA port ({self.port_why})")
        return f"{gpus}, {ports}"


def this_node() -> Hardware:
    try:
        gpus, gpu_why = nodefacts.gpu_names(), ""
    except nodefacts.Unavailable as e:
        gpus, gpu_why = [], e.reason
    try:
        up = [p for p in nodefacts.read_ports(sysfs_root()) if p.up and p.gbps]
        port, port_why = (Counter(p.gbps for p in up).most_common(1)[0][0] if up else None), "none ACTIVE"
        layer = Counter(p.link_layer for p in up).most_common(1)[0][0] if up else None
    except nodefacts.Unavailable as e:
        port, port_why, layer = None, e.reason, None
    return Hardware(gpus, gpu_why or "nvidia-smi lists none", port, port_why, layer)


def candidates() -> list[Profile]:
    return [p for p in (load_profile(name) for name in builtin_names()) if p.get("detect.gpu_model")]


def matches(profile: Profile, hw: Hardware) -> bool:
    model = profile.get("detect.gpu_model").lower()
    rate, layer = profile.get("preflight.port_rate"), profile.get("preflight.link_layer")
    return (any(model in name.lower() for name in hw.gpus)
            and (rate is None or (hw.port_gbps is not None and abs(hw.port_gbps - rate) < 1e-6))
            and (layer is None or hw.link_layer == layer))


# The built-in for hardware no other built-in knows (judged against its own fleet): named, never chosen.
FALLBACK = "fleet"


def choose(hw: Hardware | None = None) -> tuple[Profile, str]:
    """(the matching built-in, a line saying why); ProfileError saying what the node has when none
    matches, and naming them when several do."""
    hw = hw or this_node()
    found = [p for p in candidates() if matches(p, hw)]
    if len(found) == 1:
        return found[0], f"profile auto: {found[0].name} (this node: {hw.describe()})"
    known = "; ".join(f"{p.name} ({p.get('detect.gpu_model')}, {p.get('preflight.port_rate'):g} Gbit/s "
                      f"{p.get('preflight.link_layer') or 'RDMA'} ports)" for p in candidates())
    if not found:
        raise ProfileError("--profile auto", "", (
            f"no built-in profile matches this node ({hw.describe()}; built-ins with hardware: {known}). Ports "
            f"trained down or a GPU driver that does not answer match none: check them (acceptance doctor), name "
            f"a profile (--profile h100-ndr400), or judge every measurement against the run's own fleet with "
            f"--profile {FALLBACK}"))
    raise ProfileError("--profile auto", "", f"several built-ins match this node ({', '.join(p.name for p in found)};"
                       f" {hw.describe()}); built-ins with hardware: {known}; "
                       "name one, or write your own (extends = \"<built-in>\")")
