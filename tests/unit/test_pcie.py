"""PCIe links as trained, on sysfs trees shaped like a real node's (tests/fakesysfs.py)."""
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
