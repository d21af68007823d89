"""Which RDMA device this rank uses and how ([verbs] settings): discovery, availability, the engine's
configuration (kept here, set once per rank by configure())."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from ...host import nics, numa, roce
from ...host.sysfs import sysfs_root
from . import binding as pv
from .errors import VerbsError, enum_name


SYS_INFINIBAND = "/sys/class/infiniband"



@dataclass(frozen=True)
class Settings:
    """The profile's [verbs] section."""

    port: int = 1
    gid_index: int = -1
    traffic_class: int = 0
    hop_limit: int = 64
    service_level: int = 0
    tx_depth: int = 128
    cq_mod: int = 100
    timeout: int = 14
    retry_count: int = 7
    rnr_retry: int = 7
    numa_bind: bool = True

    def __post_init__(self):
        ranges = {"port": (1, 255), "gid_index": (-1, 1 << 16), "traffic_class": (0, 255),
                  "hop_limit": (0, 255), "service_level": (0, 15), "tx_depth": (1, 1 << 20),
                  "cq_mod": (1, 1 << 20), "timeout": (0, 31), "retry_count": (0, 7), "rnr_retry": (0, 7)}
        for name, (low, high) in ranges.items():
            value = getattr(self, name)
            if not isinstance(value, int) or not low <= value <= high:
                raise VerbsError(f"[verbs] {name} = {value!r}: expected an integer in {low}..{high}")

    @classmethod
    def from_profile(cls, profile) -> Settings:
        values = {f.name: profile.get(f"verbs.{f.name}") for f in fields(cls)}
        try:
            values["traffic_class"], _ = roce.traffic_class(values["traffic_class"])
        except ValueError as e:
            raise VerbsError(str(e)) from None
        return cls(**values)


@dataclass(frozen=True)
class Config:
    device: str
    settings: Settings
    # More ranks on this host than CPUs for them (virtual nodes, an emulator's guest): polling loops
    # give the CPU away between empty polls, as Open MPI does when oversubscribed (mpi_yield_when_idle).
    # A rank spinning on a CPU that its peer, or the kernel's RDMA work (rxe), needs would otherwise
    # hold it for a whole time slice: milliseconds per round trip, on some pairs and not others.
    oversubscribed: bool = False
    placement: str | None = None  # where the rank runs (acceptance.host.numa), once bound

    @property
    def relax(self) -> Callable[[], None] | None:
        """What a polling loop does after an empty poll: nothing, or yield the CPU when oversubscribed."""
        return os.sched_yield if self.oversubscribed else None



def no_devices_hint() -> str:
    if not os.path.isdir(SYS_INFINIBAND):
        return f"no {SYS_INFINIBAND}: no RDMA device or driver"
    return (f"{SYS_INFINIBAND} exists: is the verbs provider installed (ibverbs-providers, MLNX_OFED) "
            "and /dev/infiniband/uverbs* readable?")


def device_names() -> list[str]:
    """This host's RDMA device names; VerbsError with the reason when pyverbs or the devices are missing."""
    if pv.IMPORT_ERROR is not None:
        raise VerbsError(f"pyverbs not importable: {pv.IMPORT_ERROR}")
    try:
        devices = pv.get_device_list()
    except pv.PyverbsError as exc:
        raise VerbsError(f"get_device_list() failed: {exc} ({no_devices_hint()})") from exc
    return [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devices]


def port_state_name(state: int) -> str:
    return enum_name("ibv_port_state", state).removeprefix("IBV_PORT_")


def link_layer_name(link_layer: int) -> str:
    if pv.IMPORT_ERROR is None and link_layer == pv.e.IBV_LINK_LAYER_ETHERNET:
        return "Ethernet"
    return "InfiniBand"  # IBV_LINK_LAYER_INFINIBAND, and UNSPECIFIED (0), which libibverbs treats as IB


def describe_device(name: str, ports: Iterable[tuple[int, int, int]]) -> str:
    """'mlx5_0 (port 1 ACTIVE, InfiniBand)' from (port, state, link layer) rows."""
    parts = [f"port {p} {port_state_name(s)}, {link_layer_name(ll)}" for p, s, ll in ports]
    return f"{name} ({'; '.join(parts)})" if parts else f"{name} (no ports)"


def available() -> tuple[bool, str]:
    """(usable, why): pyverbs imports and at least one RDMA device is listed and opens. Never raises."""
    try:
        names = device_names()
    except VerbsError as exc:
        return False, str(exc)
    except Exception as exc:  # noqa: BLE001 - a broken binding must not take the harness down
        return False, f"get_device_list() failed: {type(exc).__name__}: {exc}"
    if not names:
        return False, f"no RDMA devices ({no_devices_hint()})"
    shown, opened = [], 0
    for name in names:
        try:
            with pv.Context(name=name) as ctx:
                count = ctx.query_device().phys_port_cnt
                ports = []
                for p in range(1, count + 1):
                    attr = ctx.query_port(p)
                    ports.append((p, attr.state, attr.link_layer))
            shown.append(describe_device(name, ports))
            opened += 1
        except Exception as exc:  # noqa: BLE001 - one unopenable device is reported, not raised
            shown.append(f"{name} (cannot open: {exc})")
    if not opened:
        return False, f"{len(names)} device(s), none can be opened: " + ", ".join(shown)
    return True, f"{len(names)} device(s): " + ", ".join(shown)


def pick_device(devices: Iterable[str], topology, nic_rails) -> str:
    """This rank's device among the host's `devices`: the one serving the rank's rail (acceptance.host.nics)."""
    device, why = nics.rail_device(topology, nic_rails, devices)
    if device is None:
        raise VerbsError(why)
    return device


def configuration(topology, profile) -> Config:
    """This rank's device (by rail) and the [verbs] settings: what VerbsEngine.configure keeps."""
    settings = Settings.from_profile(profile)
    try:
        names = device_names()
    except VerbsError as exc:
        raise VerbsError(f"rail {topology.rail} (rank {topology.rank} on {topology.node}) "
                         f"has no RDMA device: {exc}") from exc
    on_host = sum(r.host == topology.me.host for r in topology.ranks)
    device = pick_device(names, topology, profile.get("topology.nic_rails"))
    placement = (str(numa.bind_to_device(device, sysfs_root(topology.node))) if settings.numa_bind
                 else "not bound (verbs.numa_bind = false)")
    # The node's CPUs, not this rank's mask: under Slurm's core binding every rank's mask is narrower
    # than the node's ranks while no CPU is shared.
    return Config(device, settings, oversubscribed=on_host > (os.cpu_count() or 1), placement=placement)


def open_context(name: str):
    if pv.IMPORT_ERROR is not None:
        raise VerbsError(f"pyverbs not importable: {pv.IMPORT_ERROR}")
    try:
        return pv.Context(name=name)
    except pv.PyverbsError as exc:
        raise VerbsError(f"cannot open RDMA device {name}: {exc}") from exc
