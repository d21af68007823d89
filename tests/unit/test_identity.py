"""node_identity on fake sysfs trees shaped like real ones; merge_identities per node."""

import os

import pytest

from acceptance.host.identity import merge_identities, node_identity
from acceptance.host.sysfs import ENV_SYSFS_ROOT


def make_tree(root, serial="S1234567", board=None, devices=None):
    """<root>/class/dmi/id/{product,board}_serial and <root>/class/infiniband/<dev>/{node_guid,fw_ver,ports/<n>/}."""
    dmi = root / "class" / "dmi" / "id"
    dmi.mkdir(parents=True, exist_ok=True)
    if serial is not None:
        (dmi / "product_serial").write_text(serial + "\n")
    if board is not None:
        (dmi / "board_serial").write_text(board + "\n")
    for dev, (guid, fw, ports) in (devices or {}).items():
        d = root / "class" / "infiniband" / dev
        (d / "ports").mkdir(parents=True)
        for n in ports:
            (d / "ports" / str(n)).mkdir()
            (d / "ports" / str(n) / "state").write_text("4: ACTIVE\n")
        if guid is not None:
            (d / "node_guid").write_text(guid + "\n")
        if fw is not None:
            (d / "fw_ver").write_text(fw + "\n")
    return root


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_SYSFS_ROOT, str(tmp_path))
    return tmp_path


def test_serial_and_nic(sysfs):
    make_tree(sysfs, devices={"mlx5_0": ("0C42:A103:0065:E4A2", "28.39.1002", [1])})
    assert node_identity("n1", {0: "mlx5_0"}) == {
        "serial": "S1234567",
        "nics": {"0": {"device": "mlx5_0", "guid": "0c42:a103:0065:e4a2", "port": 1, "fw": "28.39.1002"}}}


@pytest.mark.parametrize("placeholder", ["To Be Filled By O.E.M.", "Not Specified", "Default string", "0", "",
                                         "System Serial Number", "NOT SPECIFIED"])
def test_placeholder_serial_is_none(sysfs, placeholder):
    make_tree(sysfs, serial=placeholder)
    assert node_identity("n1", {})["serial"] is None


def test_board_serial_when_product_serial_is_a_placeholder_or_missing(sysfs):
    make_tree(sysfs, serial="Default string", board="B-42")
    assert node_identity("n1", {})["serial"] == "B-42"
    (sysfs / "class" / "dmi" / "id" / "product_serial").unlink()
    assert node_identity("n1", {})["serial"] == "B-42"


def test_unreadable_serial_is_none(sysfs):
    make_tree(sysfs)
    path = sysfs / "class" / "dmi" / "id" / "product_serial"
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-0 file")
    path.chmod(0)
    try:
        assert node_identity("n1", {})["serial"] is None
    finally:
        path.chmod(0o644)


def test_missing_device_and_no_device(sysfs):
    make_tree(sysfs)
    assert node_identity("n1", {0: "mlx5_9", 1: None})["nics"] == {
        "0": {"device": "mlx5_9", "guid": None, "port": None, "fw": None},
        "1": {"device": None, "guid": None, "port": None, "fw": None}}


def test_lowest_port_and_missing_fw(sysfs):
    make_tree(sysfs, devices={"mlx5_1": ("0c42:a103:0065:e4a3", None, [2, 1])})
    nic = node_identity("n1", {3: "mlx5_1"})["nics"]["3"]
    assert (nic["port"], nic["fw"]) == (1, None)


def test_empty_tree_never_raises(sysfs):
    assert node_identity("n1", {0: "mlx5_0"}) == {
        "serial": None, "nics": {"0": {"device": "mlx5_0", "guid": None, "port": None, "fw": None}}}


def test_node_placeholder_in_root(tmp_path, monkeypatch):
    make_tree(tmp_path / "node1", serial="A1", devices={"mlx5_0": ("0000:0000:0000:0001", "1.0", [1])})
    make_tree(tmp_path / "node2", serial="A2", devices={"mlx5_0": ("0000:0000:0000:0002", "1.0", [1])})
    monkeypatch.setenv(ENV_SYSFS_ROOT, str(tmp_path / "{node}"))
    assert node_identity("node1", {0: "mlx5_0"})["serial"] == "A1"
    ident = node_identity("node2", {0: "mlx5_0"})
    assert (ident["serial"], ident["nics"]["0"]["guid"]) == ("A2", "0000:0000:0000:0002")


def test_merge_per_node():
    nic = lambda dev, guid: {"device": dev, "guid": guid, "port": 1, "fw": "1"}  # noqa: E731
    merged = merge_identities([
        ("node1", {"serial": None, "nics": {"0": nic("mlx5_0", "g0")}}),
        ("node1", {"serial": "S1", "nics": {"1": nic("mlx5_1", "g1")}}),
        ("node1", {"serial": "S1", "nics": {"1": nic(None, None)}}),
        ("node2", {"serial": None, "nics": {}, "error": "boom"}),
    ])
    assert merged == {"node1": {"serial": "S1", "nics": {"0": nic("mlx5_0", "g0"), "1": nic("mlx5_1", "g1")}},
                      "node2": {"serial": None, "nics": {}, "error": "boom"}}
