"""PCIe links as trained, on sysfs trees shaped like a real node's (tests/fakesysfs.py) and on the tree an
HGX H100's `lspci -vvv` describes (tests/data/pcie/README)."""
import re
import sys
from pathlib import Path

import pytest

from acceptance.host import nodefacts, pcie

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs  # noqa: E402


@pytest.mark.parametrize("text, gts", [("32.0 GT/s PCIe", 32.0), ("16.0 GT/s PCIe", 16.0), ("8 GT/s", 8.0),
                                       ("2.5 GT/s PCIe", 2.5), ("Unknown", None), (None, None), ("", None)])
def test_parse_speed(text, gts):
    assert pcie.parse_speed(text) == gts


@pytest.mark.parametrize("text, lanes", [("16", 16), ("x8", 8), ("0", 0), ("", None), (None, None)])
def test_parse_width(text, lanes):
    assert pcie.parse_width(text) == lanes


def _pci(root, name):
    return (root / "class" / "infiniband" / name / "device").resolve()


def test_a_nic_trained_narrow_or_slow_is_named_and_an_idle_gpu_or_a_gen4_slot_is_not(tmp_path):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=4, gpus=2)
    fakesysfs.pcie_link(_pci(root, "mlx5_1"), width=8)                            # trained x8 of x16
    fakesysfs.pcie_link(_pci(root, "mlx5_2"), speed="16.0 GT/s PCIe")             # Gen4 in a Gen5 slot
    fakesysfs.pcie_link(_pci(root, "mlx5_3"), speed="16.0 GT/s PCIe", port_speed="16.0 GT/s PCIe")  # a Gen4 slot
    gpus = nodefacts.nvidia_gpus(root)
    fakesysfs.pcie_link((root / "bus" / "pci" / "devices" / gpus[1]).resolve(), "2.5 GT/s PCIe", 8)
    found = nodefacts.pcie_links(root)
    assert [(l.name, l.kind) for l in found] == [("mlx5_0", "nic"), ("mlx5_1", "nic"), ("mlx5_2", "nic"),
                                                  ("mlx5_3", "nic"), (gpus[0], "gpu"), (gpus[1], "gpu")]
    assert (found[3].speed, found[3].max_speed) == (16.0, 16.0)  # the slot bounds what the NIC can train to
    assert pcie.trained_down(found) == [
        "NIC mlx5_1 (0000:28:00.0): PCIe link trained to x8 at 32 GT/s, can train to x16 at 32 GT/s (x8 of x16)",
        "NIC mlx5_2 (0000:38:00.0): PCIe link trained to x16 at 16 GT/s, can train to x16 at 32 GT/s "
        "(16 GT/s of 32 GT/s)",
        f"GPU {gpus[1]}: PCIe link trained to x8 at 2.5 GT/s, can train to x16 at 32 GT/s (x8 of x16)",
    ]


def test_devices_without_pcie_link_files_are_left_out(tmp_path):
    root = fakesysfs.rxe_device(tmp_path / "sys")
    with pytest.raises(nodefacts.Unavailable, match="no RDMA device or GPU with a PCIe link"):
        nodefacts.pcie_links(root)
    facts = nodefacts.collect(root)
    assert isinstance(facts.pcie, nodefacts.Unavailable)


# ---- an HGX H100 as lspci -vvv shows it (tests/data/pcie/README) -----------------------------------

LSPCI = (Path(__file__).resolve().parents[1] / "data" / "pcie" / "lspci-vvv-hgx-h100-excerpt.txt").read_text()
_BLOCK = re.compile(r"\n(?=[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] )")
_LNK = {"cap": re.compile(r"LnkCap:\s+Port #\d+, Speed ([\d.]+)GT/s, Width x(\d+)"),
        "sta": re.compile(r"LnkSta:\s+Speed ([\d.]+)GT/s \((ok|downgraded)\), Width x(\d+) \((ok|downgraded)\)")}
_CLASS = {"3D controller": "0x030200", "Bridge": "0x068000", "PCI bridge": "0x060400",
          "Ethernet controller": "0x020000", "Non-Volatile memory controller": "0x010802"}


def lspci_devices(text: str) -> dict[str, dict]:
    """bdf -> what the test needs of each `lspci -vvv` block."""
    out = {}
    for block in _BLOCK.split(text.strip()):
        head = block.splitlines()[0]
        bdf, rest = head.split(" ", 1)
        cls, name = rest.split(": ", 1)
        bus = re.search(r"Bus: primary=\w+, secondary=(\w+)", block)
        driver = re.search(r"Kernel driver in use: (\S+)", block)
        out["0000:" + bdf] = {"class": cls, "name": name, "secondary": bus and bus.group(1),
                              "driver": driver and driver.group(1), "cap": _LNK["cap"].search(block).groups(),
                              "sta": _LNK["sta"].search(block).groups()}
    return out


def sysfs_from_lspci(text: str, root: Path) -> dict[str, str]:
    """The sysfs tree lspci describes (a device under the bridge whose secondary bus is its bus, the
    link files as the kernel prints them); returns bdf -> RDMA device name for the mlx5 functions,
    numbered in bus order as mlx5_core probes them."""
    devices = lspci_devices(text)
    bridge_of = {d["secondary"]: bdf for bdf, d in devices.items() if d["secondary"]}

    def path(bdf: str) -> Path:
        bus = bdf[5:7]
        return (path(bridge_of[bus]) if bus in bridge_of else root / "devices" / f"pci0000:{bus}") / bdf

    names = {}
    for bdf, d in devices.items():
        pci = path(bdf)
        pci.mkdir(parents=True)
        (speed, width), (now, _, lanes, _) = d["cap"], d["sta"]
        for file, value in (("current_link_speed", f"{float(now):.1f} GT/s PCIe"), ("current_link_width", lanes),
                            ("max_link_speed", f"{float(speed):.1f} GT/s PCIe"), ("max_link_width", width),
                            ("vendor", "0x10de" if "NVIDIA" in d["name"] else
                             "0x15b3" if "Mellanox" in d["name"] else "0x8086"),
                            ("class", _CLASS[d["class"]])):
            (pci / file).write_text(value + "\n")
        (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
        (root / "bus" / "pci" / "devices" / bdf).symlink_to(pci)
        if d["driver"] == "mlx5_core":
            names[bdf] = name = f"mlx5_{len(names)}"
            dev = pci / "infiniband" / name
            dev.mkdir(parents=True)
            (dev / "device").symlink_to(pci)
            (root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
            (root / "class" / "infiniband" / name).symlink_to(dev)
    return names


def with_lnksta(text: str, bdf: str, lnksta: str) -> str:
    """The same lspci output with one device's LnkSta line replaced."""
    blocks = _BLOCK.split(text)
    i = next(i for i, b in enumerate(blocks) if b.startswith(bdf[5:] + " "))
    blocks[i] = re.sub(r"(LnkSta:\t).*", lambda m: m.group(1) + lnksta, blocks[i])
    return "\n".join(blocks)


def lspci_says_short(d: dict, kind: str) -> bool:
    """lspci's own "(downgraded)" against the device's LnkCap; a GPU's speed does not count (idle)."""
    _, speed, _, width = d["sta"]
    return width == "downgraded" or (speed == "downgraded" and kind == "nic")


def test_an_hgx_h100_node_as_lspci_shows_it_is_healthy(tmp_path):
    names = sysfs_from_lspci(LSPCI, tmp_path)
    assert names == {"0000:4f:00.0": "mlx5_0", "0000:50:00.0": "mlx5_1", "0000:50:00.1": "mlx5_2",
                     "0000:ce:00.0": "mlx5_3"}
    found = {link.name: link for link in nodefacts.pcie_links(tmp_path)}
    # the NVSwitch (10de, class bridge) is no GPU; the switch ports and the NVMe drive are not judged
    assert sorted(found) == ["0000:4e:00.0", "0000:cd:00.0", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert [(l.kind, l.speed, l.width, l.max_speed, l.max_width) for l in found.values()] == [
        ("nic", 32.0, 16, 32.0, 16), ("nic", 16.0, 16, 16.0, 16), ("nic", 16.0, 16, 16.0, 16),
        ("nic", 32.0, 16, 32.0, 16),
        ("gpu", 2.5, 16, 32.0, 16),   # idle: the link slows down, no fault
        ("gpu", 32.0, 16, 32.0, 16)]
    assert pcie.trained_down(list(found.values())) == []


@pytest.mark.parametrize("bdf, lnksta, named", [
    ("0000:4f:00.0", "Speed 32GT/s (ok), Width x8 (downgraded)",
     "NIC mlx5_0 (0000:4f:00.0): PCIe link trained to x8 at 32 GT/s, can train to x16 at 32 GT/s (x8 of x16)"),
    ("0000:ce:00.0", "Speed 16GT/s (downgraded), Width x16 (ok)",
     "NIC mlx5_3 (0000:ce:00.0): PCIe link trained to x16 at 16 GT/s, can train to x16 at 32 GT/s "
     "(16 GT/s of 32 GT/s)"),
    ("0000:50:00.1", "Speed 8GT/s (downgraded), Width x16 (ok)",   # a Gen4 card at Gen3
     "NIC mlx5_2 (0000:50:00.1): PCIe link trained to x16 at 8 GT/s, can train to x16 at 16 GT/s "
     "(8 GT/s of 16 GT/s)"),
    ("0000:cd:00.0", "Speed 32GT/s (ok), Width x4 (downgraded)",
     "GPU 0000:cd:00.0: PCIe link trained to x4 at 32 GT/s, can train to x16 at 32 GT/s (x4 of x16)"),
    ("0000:cd:00.0", "Speed 5GT/s (downgraded), Width x16 (ok)", None),  # a GPU's speed is no fault
])
def test_every_link_is_judged_as_lspci_reads_it_and_a_fault_names_its_device(tmp_path, bdf, lnksta, named):
    text = with_lnksta(LSPCI, bdf, lnksta)
    names = sysfs_from_lspci(text, tmp_path)
    found = nodefacts.pcie_links(tmp_path)
    devices = lspci_devices(text)
    by_name = {names.get(b, b): d for b, d in devices.items()}
    assert {l.name: bool(l.short()) for l in found} == {l.name: lspci_says_short(by_name[l.name], l.kind)
                                                       for l in found}
    assert pcie.trained_down(found) == ([named] if named else [])
