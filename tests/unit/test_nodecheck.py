"""`acceptance node-check`: the checks on sysfs trees shaped like a real node's, NVML answers shaped like
pynvml's, kernel logs as the NVIDIA driver prints them; --slurm against a stand-in scontrol that answers
as Slurm 22.05 does (tests/fakeslurm/scontrol). The same command on real slurmd:
tests/cluster/test_nodecheck_slurm.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fakesysfs  # noqa: E402

from acceptance.cli import main  # noqa: E402
from acceptance.checks import gpus as gpus_check  # noqa: E402
from acceptance.checks import xid as xid_check  # noqa: E402
from acceptance.checks.base import Context  # noqa: E402
from acceptance.host import slurmnode  # noqa: E402
from acceptance.rules.profile import load_profile  # noqa: E402

FAKE_SLURM = Path(__file__).resolve().parents[1] / "fakeslurm"
PROFILE = """\
extends = "local"
[preflight]
port_rate = "400Gbit/s"
link_layer = "InfiniBand"
[node_check]
checks = [{checks}]
{extra}
"""
XID_79 = "[ 4242.000001] NVRM: Xid (PCI:0000:19:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
XID_13 = ("[ 4243.000001] NVRM: Xid (PCI:0000:19:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
          "Exception on (GPC 7, TPC 0, SM 1): Out Of Range Address\n")


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node with two NDR ports (mlx5_0, mlx5_1), its sysfs tree, a profile writer and scontrol's stand-in."""
    root = tmp_path / "sys"
    fakesysfs.ib_device(root, "mlx5_0", bdf="0000:18:00.0")
    fakesysfs.ib_device(root, "mlx5_1", bdf="0000:28:00.0")
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(root))
    monkeypatch.setenv("ACCEPTANCE_NODE_CHECK_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", f"{FAKE_SLURM}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_SCONTROL_STATE", str(tmp_path / "nodes.json"))
    monkeypatch.setenv("FAKE_SCONTROL_LOG", str(tmp_path / "scontrol.log"))
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    monkeypatch.delenv("ACCEPTANCE_PROFILE", raising=False)

    def profile(checks=("ports", "counters", "pcie"), extra=""):
        path = tmp_path / "site.toml"
        path.write_text(PROFILE.format(checks=", ".join(f'"{c}"' for c in checks), extra=extra))
        return str(path)

    return SimpleNamespace(root=root, tmp=tmp_path, profile=profile,
                           slurm=lambda: json.loads((tmp_path / "nodes.json").read_text())
                           if (tmp_path / "nodes.json").exists() else {},
                           calls=lambda: [json.loads(x) for x in (tmp_path / "scontrol.log").read_text().splitlines()]
                           if (tmp_path / "scontrol.log").exists() else [])


def check(capsys, *args) -> tuple[int, dict]:
    code = main(["node-check", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def statuses(out: dict) -> dict:
    return {c["check"]: c["status"] for c in out["checks"]}


# ---- the checks --------------------------------------------------------------------------------

def test_a_healthy_node_passes_and_every_check_it_cannot_run_says_why(node, capsys):
    code, out = check(capsys, "--profile", node.profile(("ports", "counters", "pcie", "memlock", "gpudirect", "gpus", "xid")))
    assert code == 0 and out["verdict"] == "pass", out
    assert statuses(out) == {"ports": "pass", "counters": "pass", "pcie": "pass", "memlock": "pass",
                             "gpudirect": "skip", "gpus": "skip", "xid": "skip"}
    assert all(c["note"] for c in out["checks"] if c["status"] == "skip"), out
    assert next(c for c in out["checks"] if c["check"] == "gpus")["note"].startswith("no NVIDIA GPU on this node")


def test_a_port_down_slow_or_trained_down_is_named(node, capsys):
    fakesysfs.set_port(node.root, "mlx5_1", 1, state="1: DOWN", phys_state="3: Disabled")
    fakesysfs.set_port(node.root, "mlx5_0", 1, rate="200 Gb/sec (4X HDR)")
    fakesysfs.pcie_link(node.root / "bus" / "pci" / "devices" / "0000:18:00.0", "32.0 GT/s PCIe", 8)
    code, out = check(capsys, "--profile", node.profile())
    assert code == 1 and statuses(out) == {"ports": "fail", "counters": "pass", "pcie": "fail"}, out
    problems = [(c["check"], p["part"], p["detail"]) for c in out["checks"] for p in c["problems"]]
    assert ("ports", "mlx5_1 port 1", "1: DOWN / 3: Disabled") in problems
    assert ("ports", "mlx5_0 port 1", "rate 200 Gb/sec (4X HDR) is below the profile's 400 Gbit/s") in problems
    assert ("pcie", "NIC mlx5_0 (0000:18:00.0)",
            "PCIe link trained to x8 at 32 GT/s, can train to x16 at 32 GT/s (x8 of x16)") in problems
    main(["node-check", "--profile", node.profile()])
    text = capsys.readouterr().out.splitlines()
    assert "FAIL ports: mlx5_1 port 1: 1: DOWN / 3: Disabled" in text
    assert text[-1].startswith("node-check gpu07: FAIL in ")


def test_error_counters_are_judged_since_the_last_check(node, capsys):
    profile = node.profile(("counters",))
    code, out = check(capsys, "--profile", profile)
    assert code == 0 and out["checks"][0]["note"].startswith("first check: 2 ports' counters kept"), out
    code, out = check(capsys, "--profile", profile)
    assert code == 0 and out["checks"][0]["status"] == "pass"
    fakesysfs.set_counter(node.root, "mlx5_1", 1, "link_downed", 3)
    code, out = check(capsys, "--profile", profile)
    assert code == 1
    (p,) = out["checks"][0]["problems"]
    assert p["part"] == "mlx5_1 port 1" and p["detail"].startswith("link_downed rose by 3"), p
    code, out = check(capsys, "--profile", profile)  # nothing rose since
    assert code == 0, out


def test_no_rdma_device_where_the_profile_needs_ports_fails_and_skips_where_it_does_not(node, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(tmp_path / "empty"))
    code, out = check(capsys, "--profile", node.profile(("ports",)))
    assert code == 1 and out["checks"][0]["problems"][0]["detail"].startswith("no "), out
    assert "the profile requires it: preflight.port_rate = 400" in out["checks"][0]["problems"][0]["detail"]
    code, out = check(capsys, "--profile", "local", "--checks", "ports")
    assert code == 0 and out["checks"][0]["status"] == "skip", out


def test_a_rails_netdev_stands_in_for_its_port(node, capsys):
    code, out = check(capsys, "--profile", node.profile(("ports",), 'port_netdev = "lo"\n[topology]\nrails = 2'),
                      "--checks", "ports")
    # "lo" is up with carrier in any namespace; a missing interface fails naming it.
    assert code == 0 and out["checks"][0]["note"] == "2 of 2 rail interfaces up", out
    code, out = check(capsys, "--profile", node.profile(("ports",), 'port_netdev = "nosuch{rail}"'))
    assert code == 1 and [p["part"] for p in out["checks"][0]["problems"]] == ["rail 0 (nosuch0)", "rail 1 (nosuch1)"]


def test_a_check_past_the_deadline_could_not_run(node, capsys, monkeypatch):
    fakesysfs.gpu(node.root, "0000:19:00.0")
    monkeypatch.setenv("ACCEPTANCE_KERNEL_LOG", "sleep 20")
    t0 = time.monotonic()
    code, out = check(capsys, "--profile", node.profile(("ports", "xid"), 'deadline = "1s"'))
    assert time.monotonic() - t0 < 5
    assert code == 3 and out["verdict"] == "error", out
    (xid,) = [c for c in out["checks"] if c["check"] == "xid"]
    assert xid["status"] == "error" and "did not finish within the deadline (1 s, node_check.deadline)" in xid["note"]


def test_a_deadline_past_slurms_limit_is_refused(node, capsys):
    code = main(["node-check", "--profile", node.profile(extra='deadline = "45s"')])
    assert code == 2 and "at most 30 s" in capsys.readouterr().err


# ---- Xid ------------------------------------------------------------------------------------------

def _xid(node, text, boot, previous=None):
    ctx = Context(load_profile("local"), node.root, "gpu07", previous or {})
    return xid_check.check(ctx, text=text, boot_id=boot)


def test_an_xid_calling_for_a_reboot_fails_every_check_until_the_node_rebooted(node):
    fakesysfs.gpu(node.root, "0000:19:00.0")
    first = _xid(node, XID_13 + XID_79, "boot-a")
    assert first.status == "fail"
    (p,) = first.problems  # Xid 13 is the application's: information, not a problem of the node
    assert p.part == "GPU 0000:19:00" and p.action == "reboot" and p.detail.startswith("Xid 79 (GPU has fallen off")
    again = _xid(node, XID_13 + XID_79, "boot-a", first.state)  # nothing new in the log
    assert again.status == "fail" and again.note == "no new Xid events"
    rebooted = _xid(node, "[    1.000000] Linux version 6.1.0\n", "boot-b", again.state)
    assert rebooted.status == "pass" and rebooted.state["pending"] == []


def test_xid_skips_without_a_gpu_and_a_hostile_line_cannot_change_what_is_drained(node, capsys, monkeypatch):
    assert _xid(node, XID_79, "b").status == "skip"
    fakesysfs.gpu(node.root, "0000:19:00.0")
    log = node.tmp / "kern.log"
    log.write_text('[ 5.000001] NVRM: Xid (PCI:0000:19:00): 79, pid=1, name=x"\' NodeName=node01 $(rm -rf /)`;\n')
    monkeypatch.setenv("ACCEPTANCE_KERNEL_LOG", f"cat {log}")
    code, out = check(capsys, "--profile", node.profile(("xid",)), "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "drained", out
    (drain,) = [c for c in node.calls() if c[0] == "update"]
    assert drain[:3] == ["update", "NodeName=gpu07", "State=DRAIN"] and len(drain) == 4
    reason = drain[3].removeprefix("Reason=")
    assert reason.startswith("acceptance: xid: GPU 0000:19:00: Xid 79") and len(reason) <= slurmnode.REASON_MAX
    assert not set(reason) & set("\"'`$;\n\\")


def test_a_gpu_lost_without_an_xid_or_in_dmesgs_iso_form_drains_and_a_repeated_message_is_one_problem(node, capsys, monkeypatch):
    """Shapes of real kernel logs (tests/data/xid/README.md names their sources): the driver's three-line
    "fallen off the bus" at load, with no Xid; `dmesg -x --time-format iso` lines; RmInitAdapter failing
    at every open. Before, the first two passed the check."""
    fakesysfs.gpu(node.root, "0000:4e:00.0")
    data = Path(__file__).resolve().parents[1] / "data" / "xid"
    log = node.tmp / "kern.log"
    monkeypatch.setenv("ACCEPTANCE_KERNEL_LOG", f"cat {log}")
    log.write_text((data / "dmesg-fallen-off-bus.txt").read_text())
    code, out = check(capsys, "--profile", node.profile(("xid",)), "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "drained", out
    (p,) = out["checks"][0]["problems"]
    assert p["part"] == "GPU 0000:4e:00" and p["action"] == "reboot", p
    iso = ("kern  :warn  : 2025-03-04T10:05:17,220431+00:00 NVRM: Xid (PCI:0000:4c:00): 79, pid=1, name=x, "
           "GPU has fallen off the bus.\n")
    assert _xid(node, iso, "b").problems[0].action == "reboot"
    once = _xid(node, (data / "journalctl-rminitadapter.txt").read_text(), "boot-a")
    again = _xid(node, (data / "journalctl-rminitadapter.txt").read_text() * 2, "boot-a", once.state)
    assert len(once.problems) == len(again.problems) == len(again.state["pending"]) >= 1, again


# ---- NVML ------------------------------------------------------------------------------------------

class FakeNVML:
    """The pynvml calls gpu_problems makes, answering as pynvml does (ints, a tuple, bytes bus id)."""
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0
    NVML_TEMPERATURE_GPU, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 0, 1
    nvmlClocksThrottleReasonHwSlowdown, nvmlClocksThrottleReasonSwThermalSlowdown = 0x8, 0x20
    nvmlClocksThrottleReasonHwThermalSlowdown, nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x40, 0x80

    def __init__(self, gpus):
        self.gpus = gpus

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if self.gpus[i].get("lost"):
            raise self.NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return self.gpus[i]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=h["bus"].encode())

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        if h.get("unknown"):
            raise self.NVMLError(self.NVML_ERROR_UNKNOWN)
        return h.get("ecc", 0)

    def nvmlDeviceGetRemappedRows(self, h):
        return h.get("rows", (0, 0, 0, 0))

    class NVMLError(Exception):
        """pynvml's: the NVML return code in .value, as nvml.h numbers them."""

        def __init__(self, value):
            super().__init__({3: "Not Supported", 15: "GPU is lost", 999: "Unknown Error"}.get(value, str(value)))
            self.value = value

    NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_GPU_IS_LOST, NVML_ERROR_UNKNOWN = 3, 15, 999

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)  # Ampere and newer remap rows instead

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return h.get("reasons", 0)

    def nvmlDeviceGetTemperature(self, h, sensor):
        return h.get("temp", 40)

    def nvmlDeviceGetTemperatureThreshold(self, h, kind):
        return 87


def test_nvml_answers_become_problems_naming_each_gpu(node):
    fakesysfs.gpu(node.root, "0000:19:00.0")
    fakesysfs.gpu(node.root, "0000:29:00.0")
    nvml = FakeNVML([{"bus": "00000000:19:00.0", "ecc": 2, "rows": (0, 1, 1, 0), "reasons": 0x8 | 0x20},
                     {"bus": "00000000:29:00.0", "temp": 84}])
    out = gpus_check.check(Context(load_profile("local"), node.root, "gpu07", {}), nvml=nvml)
    assert out.status == "fail"
    got = [(p.part, p.severity, p.action, p.detail) for p in out.problems]
    assert got == [
        ("GPU 00000000:19:00.0", "fail", "reset_gpu", "2 uncorrectable ECC errors since the driver loaded"),
        ("GPU 00000000:19:00.0", "fail", "reset_gpu", "row remap pending (1 uncorrectable rows): reset the GPU to apply it"),
        ("GPU 00000000:19:00.0", "fail", "drain", "clocks held down: hardware slowdown"),
        ("GPU 00000000:19:00.0", "warn", "drain", "clocks held down: software thermal slowdown"),
        ("GPU 00000000:29:00.0", "warn", "drain", "84 C, within 5 C of its slowdown temperature 87 C")]
    healthy = FakeNVML([{"bus": "00000000:19:00.0"}, {"bus": "00000000:29:00.0"}])
    assert gpus_check.check(Context(load_profile("local"), node.root, "n", {}), nvml=healthy).status == "pass"


def test_a_lost_gpu_fails_and_an_nvml_error_of_ours_could_not_run(node, capsys, monkeypatch):
    """NVML_ERROR_GPU_IS_LOST is the GPU's own failure (nvml.h: "fallen off the bus or has otherwise become
    inaccessible"): it fails and drains. Any other error but NOT_SUPPORTED means we could not ask: the other
    GPUs are still judged, and the node is left as it is (exit 3)."""
    for bdf in ("0000:19:00.0", "0000:29:00.0"):
        fakesysfs.gpu(node.root, bdf)
    lost = FakeNVML([{"bus": "00000000:19:00.0", "lost": True}, {"bus": "00000000:29:00.0"}])
    out = gpus_check.check(Context(load_profile("local"), node.root, "gpu07", {}), nvml=lost)
    assert out.status == "fail" and [(p.part, p.action) for p in out.problems] == [("GPU 0", "reboot")], out
    assert out.problems[0].detail.startswith("NVML: the GPU is lost (GPU is lost)")
    unknown = FakeNVML([{"bus": "00000000:19:00.0", "unknown": True}, {"bus": "00000000:29:00.0", "ecc": 1}])
    out = gpus_check.check(Context(load_profile("local"), node.root, "gpu07", {}), nvml=unknown)
    assert out.status == "fail" and [p.part for p in out.problems] == ["GPU 00000000:29:00.0"], out
    assert out.unchecked == ["GPU 0: NVML nvmlDeviceGetTotalEccErrors: NVMLError: Unknown Error"]
    unknown.gpus[1]["ecc"] = 0
    monkeypatch.setattr(gpus_check, "_nvml", lambda: unknown)
    code, out = check(capsys, "--profile", node.profile(("gpus",)), "--slurm")
    assert code == 3 and out["checks"][0]["status"] == "error" and out["slurm"]["outcome"] == "left", out
    assert "could not run (gpus: GPU 0: NVML nvmlDeviceGetTotalEccErrors" in out["slurm"]["detail"]
    monkeypatch.setattr(gpus_check, "_nvml", lambda: lost)
    code, out = check(capsys, "--profile", node.profile(("gpus",)), "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "drained", out
    assert node.slurm()["gpu07"]["reason"].startswith("acceptance: gpus: GPU 0: NVML: the GPU is lost")


def test_gpus_in_sysfs_without_nvml_could_not_run(node, capsys):
    fakesysfs.gpu(node.root, "0000:19:00.0")
    code, out = check(capsys, "--profile", node.profile(("gpus",)))
    assert code == 3 and out["checks"][0]["status"] == "error", out
    assert out["checks"][0]["note"].startswith("1 NVIDIA GPUs in sysfs, but NVML: ")


# ---- Slurm -------------------------------------------------------------------------------------------

def test_slurm_drains_on_a_failure_and_resumes_after_two_passes(node, capsys):
    profile = node.profile(("ports",))
    fakesysfs.set_port(node.root, "mlx5_1", 1, state="1: DOWN", phys_state="3: Disabled")
    code, out = check(capsys, "--profile", profile, "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "drained"
    assert node.slurm()["gpu07"] == {"state": "IDLE+DRAIN",
                                     "reason": "acceptance: ports: mlx5_1 port 1: 1: DOWN / 3: Disabled"}
    fakesysfs.set_port(node.root, "mlx5_1", 1, state="4: ACTIVE", phys_state="5: LinkUp")
    code, out = check(capsys, "--profile", profile, "--slurm")
    assert code == 0 and out["slurm"]["outcome"] == "left" and "until 2 passes in a row: 1 so far" in out["slurm"]["detail"]
    assert node.slurm()["gpu07"]["state"] == "IDLE+DRAIN"
    code, out = check(capsys, "--profile", profile, "--slurm")
    assert code == 0 and out["slurm"]["outcome"] == "resumed", out
    assert node.slurm()["gpu07"] == {"state": "IDLE", "reason": None}
    assert all(isinstance(c, list) and len(c) in (3, 4) for c in node.calls())  # argv lists, never a shell line


def test_slurm_never_touches_a_node_someone_else_drained(node, capsys):
    (node.tmp / "nodes.json").write_text(json.dumps({"gpu07": {"state": "IDLE+DRAIN", "reason": "NHC: check_hw_ib"}}))
    profile = node.profile(("ports",))
    for _ in range(3):
        code, out = check(capsys, "--profile", profile, "--slurm")
        assert code == 0 and out["slurm"]["outcome"] == "left", out
    fakesysfs.set_port(node.root, "mlx5_1", 1, state="1: DOWN", phys_state="3: Disabled")
    code, out = check(capsys, "--profile", profile, "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "left" and "someone else" in out["slurm"]["detail"]
    assert node.slurm()["gpu07"] == {"state": "IDLE+DRAIN", "reason": "NHC: check_hw_ib"}
    assert not [c for c in node.calls() if c[0] == "update"]


def test_slurm_leaves_the_node_when_a_check_cannot_run_or_nothing_was_checked(node, capsys, monkeypatch):
    (node.tmp / "nodes.json").write_text(json.dumps({"gpu07": {"state": "IDLE+DRAIN", "reason": "acceptance: ports: x"}}))
    fakesysfs.gpu(node.root, "0000:19:00.0")  # NVML is not here: the gpus check cannot run
    for _ in range(3):
        code, out = check(capsys, "--profile", node.profile(("ports", "gpus")), "--slurm")
        assert code == 3 and out["slurm"]["outcome"] == "left" and "could not run" in out["slurm"]["detail"], out
    monkeypatch.setenv("ACCEPTANCE_SYSFS_ROOT", str(node.tmp / "empty"))
    for _ in range(3):
        code, out = check(capsys, "--profile", "local", "--checks", "ports,pcie", "--slurm")
        assert code == 0 and "nothing was checked" in out["slurm"]["detail"], out
    assert node.slurm()["gpu07"]["state"] == "IDLE+DRAIN"
    assert not [c for c in node.calls() if c[0] == "update"]


def test_a_bad_profile_exits_2_and_touches_no_node(node, capsys):
    code = main(["node-check", "--slurm", "--profile", str(node.tmp / "missing.toml")])
    assert code == 2 and "profile error" in capsys.readouterr().err
    code = main(["node-check", "--slurm", "--profile", node.profile(extra="resume_after = 0")])
    assert code == 2
    assert node.calls() == []


def test_an_unreachable_controller_is_said_and_not_a_pass(node, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_SCONTROL_FAIL", "1")
    code, out = check(capsys, "--profile", node.profile(("ports",)), "--slurm")
    assert code == 3 and out["verdict"] == "pass" and out["slurm"]["outcome"] == "failed", out
    assert "Unable to contact slurm controller" in out["slurm"]["detail"]


# ---- scontrol's own words ------------------------------------------------------------------------------

IDLE = ("NodeName=node2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.41 "
        "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=198.18.0.2 NodeHostName=vm Port=17002 "
        "Version=22.05.8 OS=Linux 6.18.44-fc-v1252 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1 AllocMem=0 FreeMem=21776 "
        "Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=emu  "
        "BootTime=2026-12-04T06:33:36 SlurmdStartTime=2026-12-04T19:11:13 LastBusyTime=2026-12-04T19:11:13 "
        "CfgTRES=cpu=2,mem=1M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
        "ExtSensorsWatts=0 ExtSensorsTemp=n/s\n")


def test_scontrol_show_node_as_slurm_22_05_prints_it():
    """Lines as `scontrol show node -o node2` printed them on Debian's Slurm 22.05.8 here."""
    idle = slurmnode.parse_show_node(IDLE, "node2")
    assert (idle.state, idle.reason, idle.drained) == ("IDLE", None, False)
    drained = IDLE.replace("State=IDLE ", "State=IDLE+DRAIN ").replace(
        "\n", " Reason=maintenance: x [root@2026-12-04T19:11:55]\n")
    d = slurmnode.parse_show_node(drained, "node2")
    assert (d.state, d.reason, d.drained, d.ours) == ("IDLE+DRAIN", "maintenance: x", True, False)
    ours = drained.replace("maintenance: x", "acceptance: ports: rail 1 (rail1): interface down")
    assert slurmnode.parse_show_node(ours, "node2").ours
    busy = drained.replace("State=IDLE+DRAIN ", "State=MIXED+DRAIN ")
    assert slurmnode.parse_show_node(busy, "node2").drained
    assert not slurmnode.parse_show_node(IDLE.replace("State=IDLE ", "State=IDLE+NOT_RESPONDING "), "node2").drained
    with pytest.raises(slurmnode.SlurmError):
        slurmnode.parse_show_node(IDLE, "node3")


def test_a_reason_is_one_clean_argument_in_our_namespace():
    r = slurmnode.reason("xid", 'GPU 0000:19:00: x" NodeName=n1 State=RESUME $(reboot)`\n\x1b[31m' + "y" * 400)
    assert r.startswith("acceptance: xid: GPU 0000:19:00: x NodeName=n1 State=RESUME (reboot)")
    assert len(r) <= slurmnode.REASON_MAX and not set(r) & set("\"'`$;\n\x1b\\")
    d = slurmnode.Drain("gpu07", r)
    assert d.argv[-1] == f"Reason={r}" and len(d.argv) == 5


def test_memlock_below_the_profiles_minimum_fails(node, capsys, monkeypatch):
    import resource
    monkeypatch.setattr(resource, "getrlimit", lambda which: (65536, 65536))
    code, out = check(capsys, "--profile", node.profile(("memlock",)))  # local's memlock_min: 8 MiB
    assert code == 1 and out["checks"][0]["problems"][0]["detail"].startswith("RLIMIT_MEMLOCK (ulimit -l) is 65536 bytes"), out


def test_no_fleet_wide_drain_for_one_check(node, capsys, monkeypatch):
    """A tenth of the cluster (at least 2 nodes) drained for one check already: a shared cause; the
    next node failing it is left, saying why, and one failing another check is still drained."""
    monkeypatch.setenv("FAKE_SINFO_NODES", ",".join(f"gpu{i:02d}" for i in range(1, 21)))
    why = "acceptance: ports: mlx5_1 port 1: 1: DOWN / 3: Disabled"
    (node.tmp / "nodes.json").write_text(json.dumps({n: {"state": "IDLE+DRAIN", "reason": why} for n in ("gpu01", "gpu02")}))
    fakesysfs.set_port(node.root, "mlx5_1", 1, state="1: DOWN", phys_state="3: Disabled")
    code, out = check(capsys, "--profile", node.profile(("ports",)), "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "left", out
    assert "2 of 20 nodes are drained for ports already" in out["slurm"]["detail"]
    assert "gpu07" not in node.slurm() or node.slurm()["gpu07"]["state"] == "IDLE"
    fakesysfs.set_port(node.root, "mlx5_1", 1, state="4: ACTIVE", phys_state="5: LinkUp")
    fakesysfs.pcie_link(node.root / "bus" / "pci" / "devices" / "0000:18:00.0", "32.0 GT/s PCIe", 8)
    code, out = check(capsys, "--profile", node.profile(("ports", "pcie")), "--slurm")
    assert code == 1 and out["slurm"]["outcome"] == "drained", out


def test_a_state_folder_it_cannot_write_is_an_input_error(node, capsys, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    code = main(["node-check", "--slurm", "--profile", node.profile(), "--state", str(blocked / "sub")])
    assert code == 2 and "cannot keep node-check's state there" in capsys.readouterr().err
    assert node.calls() == []
