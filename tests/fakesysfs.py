"""File trees shaped exactly like a real node's /sys, for the counter and preflight parsers.

The layout follows the kernel (drivers/infiniband/core/sysfs.c, Documentation/ABI):
the device lives under /sys/devices/pci.../<bdf>/infiniband/<dev>, and
/sys/class/infiniband/<dev>, /sys/class/net/<netdev> and /sys/bus/pci/devices/<bdf>
are symlinks into it. Files hold what the kernel prints, newline included.
Point ACCEPTANCE_SYSFS_ROOT at the returned root.
"""

from __future__ import annotations

import os
from pathlib import Path

# PMA PortCounters as mlx5 exposes them (extended width: data and packet counters are 64-bit).
PMA_COUNTERS = (
    "symbol_error", "port_rcv_errors", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_discards", "VL15_dropped", "link_error_recovery", "link_downed",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "port_xmit_wait", "port_xmit_data", "port_rcv_data",
    "port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets", "unicast_rcv_packets",
    "multicast_xmit_packets", "multicast_rcv_packets",
)
# A subset of mlx5 hw_counters (drivers/infiniband/hw/mlx5/counters.c).
HW_COUNTERS = (
    "out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err", "packet_seq_err",
    "implied_nak_seq_err", "local_ack_timeout_err", "resp_local_length_error", "resp_cqe_error",
    "req_cqe_error", "req_remote_access_errors", "req_remote_invalid_request", "rx_write_requests",
    "rx_read_requests", "rx_atomic_requests", "np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored",
    "np_ecn_marked_roce_packets", "rx_icrc_encapsulated",
)
# rxe (Soft-RoCE) hw_counters as Debian's 6.1 kernel lists them (drivers/infiniband/sw/rxe/rxe_hw_counters.c).
RXE_HW_COUNTERS = (
    "ack_deferred", "completer_retry_err", "duplicate_request", "link_downed", "out_of_seq_request",
    "rcvd_pkts", "rcvd_rnr_err", "rcvd_seq_err", "rdma_recvs", "rdma_sends", "retry_exceeded_err",
    "retry_rnr_exceeded_err", "send_err", "send_rnr_err", "sent_pkts",
)
HW_COUNTERS_ROCE_ONLY = ("np_cnp_sent", "rp_cnp_handled", "rp_cnp_ignored", "np_ecn_marked_roce_packets",
                         "rx_icrc_encapsulated")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.relpath(target, link.parent))


def ib_device(root: Path, name: str = "mlx5_0", *, bdf: str = "0000:18:00.0", ports: int = 1,
              link_layer: str = "InfiniBand", rate: str = "400 Gb/sec (4X NDR)", state: str = "4: ACTIVE",
              phys_state: str = "5: LinkUp", fw_ver: str = "28.39.1002", netdev: str | None = None,
              netdev_mtu: int = 4200, driver: str = "mlx5_core", driver_version: str | None = None,
              numa_node: int = 0, lid: str = "0x12", node_desc: str | None = None,
              counters: dict[str, int] | None = None, hw_counters: dict[str, int] | None = None,
              pcie: tuple[str, int] = ("32.0 GT/s PCIe", 16), hca_type: str = "MT4129",
              virtual: bool = False) -> Path:
    """One RDMA device with `ports` ports; returns the sysfs root (for chaining).

    counters / hw_counters override the zero defaults on every port. pcie: the link as trained
    (speed, width); the device and its upstream port can do Gen5 x16. hca_type: what mlx5 prints
    (MT4129 ConnectX-7, MT4125 ConnectX-6 Dx, MT4123 ConnectX-6). virtual: an SR-IOV virtual
    function, whose PCI function links to its physical function (physfn).
    """
    root = Path(root)
    pci = root / "devices" / "pci0000:00" / _port_of(bdf) / bdf
    pcie_link(pci, *pcie)
    dev = pci / "infiniband" / name
    _write(pci / "numa_node", str(numa_node))
    _write(pci / "vendor", "0x15b3")
    _write(pci / "class", "0x020700" if link_layer == "InfiniBand" else "0x020000")
    _write(pci / "local_cpulist", "0-31")
    drv = root / "bus" / "pci" / "drivers" / driver
    drv.mkdir(parents=True, exist_ok=True)
    _link(pci / "driver", drv)
    if driver_version:
        _write(root / "module" / driver / "version", driver_version)
    _link(root / "bus" / "pci" / "devices" / bdf, pci)
    _write(dev / "fw_ver", fw_ver)
    _write(dev / "hca_type", hca_type)
    if virtual:
        parent = root / "devices" / "pci0000:00" / "0000:00:01.0" / "0000:01:00.0"
        parent.mkdir(parents=True, exist_ok=True)
        _link(pci / "physfn", parent)
    _write(dev / "node_type", "1: CA")
    _write(dev / "node_desc", node_desc or f"node {name}")
    _link(dev / "device", pci)
    _link(root / "class" / "infiniband" / name, dev)
    if netdev:
        net = pci / "net" / netdev
        _write(net / "mtu", str(netdev_mtu))
        _write(net / "operstate", "up")
        _link(root / "class" / "net" / netdev, net)
    for p in range(1, ports + 1):
        port = dev / "ports" / str(p)
        _write(port / "state", state)
        _write(port / "phys_state", phys_state)
        _write(port / "rate", rate)
        _write(port / "link_layer", link_layer)
        _write(port / "lid", lid if link_layer == "InfiniBand" else "0x0")
        _write(port / "sm_lid", "0x1" if link_layer == "InfiniBand" else "0x0")
        _write(port / "gids" / "0", "fe80:0000:0000:0000:0000:0000:0000:0001")
        _write(port / "gids" / "1", "0000:0000:0000:0000:0000:0000:0000:0000")
        for c in PMA_COUNTERS:
            _write(port / "counters" / c, str((counters or {}).get(c, 0)))
        for c in HW_COUNTERS:
            if link_layer == "InfiniBand" and c in HW_COUNTERS_ROCE_ONLY:
                continue
            _write(port / "hw_counters" / c, str((hw_counters or {}).get(c, 0)))
        _write(port / "hw_counters" / "lifespan", "10")
    return root


def rxe_device(root: Path, name: str = "rxe0", *, netdev: str = "eth0", address: str = "192.0.2.1",
               mac_guid: str = "7c0f:11ff:fe01:3332", netdev_mtu: int = 1500,
               hw_counters: dict[str, int] | None = None) -> Path:
    """A Soft-RoCE device as `rdma link add <name> type rxe netdev <netdev>` makes it (read off the
    Soft-RoCE rig's guest): a virtual device (no PCI parent, no device link), an empty fw_ver, its
    netdev in `parent`, one Ethernet port at 10 Gb/sec, RoCE v2 GIDs for the netdev's link-local
    IPv6 and IPv4 addresses, rxe's hw_counters and no PMA counters folder."""
    root = Path(root)
    dev = root / "devices" / "virtual" / "infiniband" / name
    for file, text in (("fw_ver", ""), ("node_desc", "rxe"), ("node_guid", mac_guid), ("node_type", "1: CA"),
                       ("parent", netdev), ("sys_image_guid", mac_guid)):
        _write(dev / file, text)
    _link(root / "class" / "infiniband" / name, dev)
    net = root / "devices" / "virtual" / "net" / netdev
    _write(net / "mtu", str(netdev_mtu))
    _write(net / "operstate", "up")
    _link(root / "class" / "net" / netdev, net)
    port = dev / "ports" / "1"
    for file, text in (("cap_mask", "0x00010000"), ("lid", "0x0"), ("lid_mask_count", "0"),
                       ("link_layer", "Ethernet"), ("phys_state", "5: LinkUp"), ("rate", "10 Gb/sec (1X FDR10)"),
                       ("sm_lid", "0x0"), ("sm_sl", "0"), ("state", "4: ACTIVE")):
        _write(port / file, text)
    a, b, c, d = (int(x) for x in address.split("."))
    gids = [f"fe80:0000:0000:0000:{mac_guid}", f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"]
    for i in range(4):  # the table has 1024 entries; the unused ones read as zeros
        _write(port / "gids" / str(i), gids[i] if i < len(gids) else ":".join(["0000"] * 8))
    for i in range(len(gids)):
        _write(port / "gid_attrs" / "types" / str(i), "RoCE v2")
        _write(port / "gid_attrs" / "ndevs" / str(i), netdev)
    for c_name in RXE_HW_COUNTERS:
        _write(port / "hw_counters" / c_name, str((hw_counters or {}).get(c_name, 0)))
    _write(port / "hw_counters" / "lifespan", "10")
    return root


def set_counter(root: Path, device: str, port: int, name: str, value: int, hw: bool = False) -> None:
    """What the NIC does between two reads: a counter file now holds `value`."""
    sub = "hw_counters" if hw else "counters"
    _write(Path(root) / "class" / "infiniband" / device / "ports" / str(port) / sub / name, str(value))


def set_port(root: Path, device: str, port: int, **files: str) -> None:
    """Overwrite port status files, e.g. set_port(root, "mlx5_1", 1, rate="200 Gb/sec (4X HDR)")."""
    for key, text in files.items():
        _write(Path(root) / "class" / "infiniband" / device / "ports" / str(port) / key, text)


def _port_of(bdf: str) -> str:
    """The root port above a device: one per bus, so each device's upstream link is its own."""
    bus = int(bdf.split(":")[1], 16)
    return f"0000:00:{(bus >> 3) & 0x1f:02x}.{bus & 7}"


def pcie_link(pci: Path, speed: str = "32.0 GT/s PCIe", width: int = 16, *, max_speed: str = "32.0 GT/s PCIe",
              max_width: int = 16, port_speed: str = "32.0 GT/s PCIe", port_width: int = 16) -> None:
    """A PCI function's link files as the kernel writes them, and its upstream port's maximum."""
    for name, value in (("current_link_speed", speed), ("current_link_width", width),
                        ("max_link_speed", max_speed), ("max_link_width", max_width)):
        _write(pci / name, str(value))
    _write(pci.parent / "max_link_speed", port_speed)
    _write(pci.parent / "max_link_width", str(port_width))


def gpu(root: Path, bdf: str, *, numa_node: int = 0, pcie: tuple[str, int] = ("2.5 GT/s PCIe", 16)) -> Path:
    """An NVIDIA GPU as the PCI core shows it (vendor 0x10de, 3D controller class); pcie: its link now
    (an idle GPU's is at 2.5 GT/s), of a Gen5 x16 maximum."""
    root = Path(root)
    pci = root / "devices" / "pci0000:00" / _port_of(bdf) / bdf
    pcie_link(pci, *pcie)
    _write(pci / "vendor", "0x10de")
    _write(pci / "class", "0x030200")
    _write(pci / "numa_node", str(numa_node))
    drv = root / "bus" / "pci" / "drivers" / "nvidia"
    drv.mkdir(parents=True, exist_ok=True)
    _link(pci / "driver", drv)
    _link(root / "bus" / "pci" / "devices" / bdf, pci)
    return root


def hugepages(root: Path, size_kb: int, count: int) -> Path:
    _write(Path(root) / "kernel" / "mm" / "hugepages" / f"hugepages-{size_kb}kB" / "nr_hugepages", str(count))
    return Path(root)


def module(root: Path, name: str, version: str | None = "1.0") -> Path:
    """A loaded kernel module (/sys/module/<name>, with a version file when it has one)."""
    d = Path(root) / "module" / name
    d.mkdir(parents=True, exist_ok=True)
    if version:
        _write(d / "version", version)
    return Path(root)


def dgx_node(root: Path, *, nics: int = 8, link_layer: str = "InfiniBand", gpus: int = 8, **kw) -> Path:
    """A node shaped like a DGX H100: mlx5_0..N-1, one port each, and N GPUs."""
    for i in range(nics):
        ib_device(root, f"mlx5_{i}", bdf=f"0000:{0x18 + 0x10 * i:02x}:00.0", link_layer=link_layer,
                  netdev=f"ibp{0x18 + 0x10 * i}s0" if link_layer == "InfiniBand" else f"ens{i}f0np0",
                  numa_node=0 if i < nics // 2 else 1, **kw)
    for i in range(gpus):
        gpu(root, f"0000:{0x19 + 0x10 * i:02x}:00.0", numa_node=0 if i < gpus // 2 else 1)
    return Path(root)


def ecn(root: Path, netdev: str, np: tuple[int, ...] = (3,), rp: tuple[int, ...] = (3,)) -> Path:
    """MLNX_OFED's ECN sysfs of one netdev: ecn/{roce_np,roce_rp}/enable/<0..7>, "1" where on."""
    for point, on in (("roce_np", np), ("roce_rp", rp)):
        for prio in range(8):
            _write(Path(root) / "class" / "net" / netdev / "ecn" / point / "enable" / str(prio),
                   "1" if prio in on else "0")
    return Path(root)


def dcb_standin(bin_dir: Path, ports: dict[str, tuple[tuple[int, ...], dict[int, int]]]) -> Path:
    """A `dcb` that answers `dcb -j pfc show dev X` and `dcb -j app show dev X dscp-prio` as iproute2
    prints them (dcb_pfc.c: "prio_pfc", one on/off per priority; dcb_app.c: "dscp_prio", [dscp, prio,
    " "] per entry), for each netdev: (priorities with PFC, DSCP -> priority table); others fail as
    dcb does on a device without DCB."""
    import json
    data = Path(bin_dir) / "dcb-data"
    data.mkdir(parents=True, exist_ok=True)
    for netdev, (pfc, table) in ports.items():
        _write(data / f"{netdev}.pfc", json.dumps({"pfc_cap": 8, "macsec_bypass": False, "delay": 0,
                                                   "prio_pfc": [p in pfc for p in range(8)]}))
        _write(data / f"{netdev}.app", json.dumps({"dscp_prio": [[d, p, " "] for d, p in sorted(table.items())]}))
    script = Path(bin_dir) / "dcb"
    script.write_text(f'''#!/bin/sh
# dcb -j OBJECT show dev NETDEV [...]
kind=$2; dev=$5
f="{data}/$dev.$kind"
if [ -f "$f" ]; then cat "$f"; exit 0; fi
echo "Attribute failed: Operation not supported" >&2; exit 1
''')
    script.chmod(0o755)
    return script
