"""`--profile auto`: the built-in whose GPU model and RDMA port rate match the node."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs

from acceptance.rules import autoprofile
from acceptance.rules.autoprofile import Hardware
from acceptance.rules.profile import ProfileError

H100 = ["NVIDIA H100 80GB HBM3"] * 8


@pytest.mark.parametrize("gpus, gbps, layer, name", [
    (H100, 400.0, "InfiniBand", "h100-ndr400"),
    (H100, 400.0, "Ethernet", "h100-roce400"),   # the same rate: the link layer tells them apart
    (["NVIDIA H200"] * 8, 400.0, "InfiniBand", "h200-ndr400"),
    (["NVIDIA A100-SXM4-80GB"] * 8, 200.0, "InfiniBand", "a100-hdr200"),
])
def test_the_matching_built_in_is_chosen_and_said(gpus, gbps, layer, name):
    profile, why = autoprofile.choose(Hardware(gpus, "", gbps, "", layer))
    assert profile.name == name
    assert why == f"profile auto: {name} (this node: 8x {gpus[0]}, {layer} RDMA ports at {gbps:g} Gbit/s)"


@pytest.mark.parametrize("hw, said", [
    (Hardware(H100, "", 200.0, "", "InfiniBand"), "8x NVIDIA H100 80GB HBM3, InfiniBand RDMA ports at 200 Gbit/s"),
    (Hardware([], "nvidia-smi not found on PATH", None, "no /sys/class/infiniband"),
     "no GPU (nvidia-smi not found on PATH), no RDMA port (no /sys/class/infiniband)"),
])
def test_no_match_is_an_error_naming_what_the_node_has(hw, said):
    """An H100 node whose ports trained down to 200 Gbit/s matches no built-in: it must not be judged by the
    lenient fleet profile (which asks nothing of its ports), so auto refuses, as the README says."""
    with pytest.raises(ProfileError) as info:
        autoprofile.choose(hw)
    assert str(info.value).startswith(
        f"--profile auto: no built-in profile matches this node ({said}; built-ins with hardware: a100-hdr200 (A100, "
        "200 Gbit/s InfiniBand ports); h100-ndr400 (H100, 400 Gbit/s InfiniBand ports); h100-roce400 (H100, 400 "
        "Gbit/s Ethernet ports); h200-ndr400 (H200, 400 Gbit/s InfiniBand ports))"), info.value
    assert "--profile fleet" in str(info.value)


def test_several_matches_must_be_told_apart(monkeypatch):
    twin = autoprofile.load_profile("h100-ndr400")
    monkeypatch.setattr(autoprofile, "candidates", lambda: [twin, twin])
    with pytest.raises(ProfileError) as info:
        autoprofile.choose(Hardware(H100, "", 400.0, "", "InfiniBand"))
    assert "several built-ins match this node (h100-ndr400, h100-ndr400" in str(info.value)


def test_this_node_reads_nvidia_smi_and_the_port_rates(tmp_path, monkeypatch):
    root = fakesysfs.dgx_node(tmp_path / "sys", nics=2, gpus=0)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(f"echo '{name}'\n" for name in H100[:2]))
    smi.chmod(0o755)
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(root))
    monkeypatch.setenv("ACCEPTANCE_NVIDIA_SMI", str(smi))
    hw = autoprofile.this_node()
    assert hw.gpus == H100[:2] and hw.port_gbps == 400.0 and hw.link_layer == "InfiniBand"
    assert autoprofile.choose(hw)[0].name == "h100-ndr400"


def test_run_and_node_check_with_auto_on_a_node_that_matches_nothing_exit_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "ACCEPTANCE_SYSFS_ROOT": str(tmp_path / "none"),
           "ACCEPTANCE_NVIDIA_SMI": "/nonexistent/nvidia-smi", "ACCEPTANCE_NODE_CHECK_STATE": str(tmp_path / "state")}
    tool = str(Path(sys.executable).parent / "acceptance")
    for argv in (["run", "--profile", "auto", "--nodes", "1", "--ranks-per-node", "1", "--", "-m", "preflight"],
                 ["node-check", "--slurm"]):  # node-check's default profile is auto
        p = subprocess.run([tool, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "--profile auto: no built-in profile matches this node (no GPU" in p.stderr, p.stderr
    assert not (tmp_path / "reports").exists()
