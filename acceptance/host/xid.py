"""NVIDIA Xid events in this node's kernel log: what each code is, what it calls for, and which are new.

The Xid piece of a node-local health check (Slurm's HealthCheckProgram): read the kernel log, find
the Xid lines the driver printed since the previous check, and the driver's messages that report a
GPU the node cannot use without an Xid (fallen off the bus, failed to initialize), look each up, and
say per GPU what the node needs (nothing, the application's fault, drain, a GPU reset, a reboot, an
RMA).

Sources
- Names and actions: NVIDIA's Xid catalog for Ampere and newer GPUs, "Analyzing Xid Errors with the
  Xid Catalog", https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (its "Xids"
  sheet: Mnemonic, Description, "Resolution Bucket (Immediate Action)", Trigger Conditions; its
  "XID 144-150 Decode" sheet; its "Guidance Classes" sheet, which defines each bucket). CATALOG keeps
  the mnemonic, the description as `name` and the immediate-action bucket of every code the catalog
  marks as used on A100, H100, B100 or GB200, plus 61, 122 and 123 (asked for; "Unused" there).
- Mnemonics and the older names: NVIDIA open-gpu-kernel-modules src/common/sdk/nvidia/inc/nverror.h
  (ROBUST_CHANNEL_ERROR_STR_PUBLIC), used where the catalog's description is "Unused".
- The application-error set: NVIDIA k8s-device-plugin internal/rm/health.go ignores 13, 31, 43, 45,
  68 and 109 as application errors. Where it and the catalog disagree (109: the catalog says
  RESET_GPU) the catalog wins and the entry's source says so.
- The line format: open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c (krcReportXid):
  "NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s", with " GPU-I:%02u" and " GPU-CI:%02u"
  inside the parenthesis on a MIG GPU, pid "'<unknown>'" and name "<unknown>" when no channel is
  known, and " caused by previous Xid %d" after an Xid 45 whose cause is known; older drivers print
  no name, or no pid either, and the oldest no "PCI:". The messages that are no Xid: see LOST.
- What precedes the driver's text on a line depends on the tool (dmesg and its -T, -x and
  --time-format, journalctl and its -o, rsyslog): _TOKEN lists them. The driver's text is found
  wherever it stands on a line, unless what stands before it shows it quoted inside another
  message (_QUOTED), so a tool's prefix this module does not know is no silent miss.
- Xid 154's text, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", with
  the values None, Drain P2P, Drain and Reset, GPU Reset Required, Node Reboot Required: the catalog's
  row for 154; the numbers are NVML's nvmlDeviceGpuRecoveryAction_t (0 none, 1 GPU reset, 2 node
  reboot, 3 drain P2P, 4 drain and reset), used when a driver prints a label not in that list.

The catalog's buckets become this module's actions by BUCKET_ACTIONS, one line each with the reason.
No immediate action in the catalog is an RMA (it is an investigatory step, e.g. Xid 48's SRAM
threshold), so no entry here says "rma"; the action exists for the checks that can tell (row-remap
failure counters).

"Since the last check" is a Cursor on the kernel's monotonic clock: the newest `[ seconds.micros]`
stamp seen, how many lines carried it (lines printed in the same microsecond, as one Xid on several
GPUs is, may straddle a read), and the boot it belongs to (/proc/sys/kernel/random/boot_id; the
clock restarts at boot). Both sources the reader uses print that stamp (`dmesg`, and `journalctl -k
-o short-monotonic`), so one cursor serves both and any override that prints it. journalctl's own
cursor (--show-cursor/--after-cursor) is not used: it would tie the state to journald, and the dmesg
fallback and an override could not honour it. A log with no monotonic stamp at all (dmesg -T or
--time-format iso, journalctl -o short or short-iso, a kern.log without the kernel's stamp) is
placed by its content instead: the cursor keeps a hash of each of its last TAIL_LINES lines, and what
follows those lines in the next read is new. Its wall-clock stamps are not compared: dmesg computes
them afresh at each run (their microseconds move between runs; the hash leaves fractions out) and the
clock can be stepped, so an order by them could call a new line old. Where those lines are not found
(a boot, a rotation past them, a stamp printed a second later), every line is new again: an event
reported twice is better than one never reported.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from . import kernellog
from .slurmnode import clean_reason

# -- the catalog --------------------------------------------------------------------------------

# Least to most disruptive; a summary's worst action is the last of these that any event calls for.
ACTIONS = ("info", "app", "drain", "reset_gpu", "reboot", "rma")

# What a Slurm node goes through for each action: a GPU cannot be reset, nor a node rebooted or
# opened for an RMA, with jobs on it, so each of those starts by draining the node.
STEPS = {
    "info": ("info",),
    "app": ("app",),
    "drain": ("drain",),
    "reset_gpu": ("drain", "reset_gpu"),
    "reboot": ("drain", "reboot"),
    "rma": ("drain", "rma"),
}

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"  # "NVIDIA Xid catalog"

# The catalog's immediate-action buckets ("Guidance Classes" sheet) -> (action, why).
BUCKET_ACTIONS = {
    "RESTART_APP": ("app", "the application restarts; RESET_GPU or RESTART_BM not deemed necessary"),
    "IGNORE": ("info", "no action required"),
    "RESET_GPU": ("reset_gpu", "reset the GPU"),
    "RESTART_BM": ("reboot", "restart bare metal"),
    "RESTART_VM": ("reboot", "restart the VM that owns the GPU (the node, where the node is that VM)"),
    "CHECK_MECHANICALS": ("drain", "check the device's seating and connections: hands on the node"),
    "UPDATE_SWFW": ("drain", "update firmware and software before vGPU can run"),
    "CHECK_UVM": ("reset_gpu", "RESET_GPU where UVM is in use, as under every CUDA job"),
    "CONTACT_SUPPORT": ("info", "not a recovery action: none documented"),
    "WORKFLOW_XID_45": ("app", "solo: restart Fabric Manager; with other Xids: follow those"),
    "WORKFLOW_XID_48": ("reset_gpu", "solo: RESET_GPU; with Xid 63 or 64: DRAIN_AND_RESET"),
    "WORKFLOW_NVLINK_ERR": ("reset_gpu", "'A GPU reset or node reboot is needed to clear this error'"),
    "WORKFLOW_NVLINK5_ERR": ("info", "the action is in the message's decode (XID 144-150 Decode sheet)"),
    "XID_154": ("info", "the action is in the message: follow Xid 154's reported guidance"),
    "": ("info", "the catalog gives this code no resolution bucket"),
}

# code | mnemonic | immediate-action bucket | name (the catalog's description; nverror.h's string or
# the mnemonic where the catalog says "Unused").
_CATALOG_ROWS = """
8|ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT|RESTART_APP|GPU stopped processing
11|ROBUST_CHANNEL_GR_ERROR_MISSING_HW|RESTART_APP|Invalid or corrupted push buffer stream
13|ROBUST_CHANNEL_GR_EXCEPTION|RESTART_APP|Graphics Engine Exception
14|ROBUST_CHANNEL_FAKE_ERROR|IGNORE|Fake Error
25|ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY|RESTART_APP|Invalid or illegal push buffer stream
31|ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT|RESTART_APP|GPU memory page fault
32|ROBUST_CHANNEL_PBDMA_ERROR|RESTART_APP|Invalid or corrupted push buffer stream
37|ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD|IGNORE|Driver firmware error
38|ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT|IGNORE|Driver firmware error
39|ROBUST_CHANNEL_CE0_ERROR|RESTART_APP|Copy Engine Exception
40|ROBUST_CHANNEL_CE1_ERROR|RESTART_APP|Copy Engine Exception
41|ROBUST_CHANNEL_CE2_ERROR|RESTART_APP|Copy Engine Exception
43|ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR|IGNORE|GPU stopped processing
44|ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW|IGNORE|Graphics Engine fault during context switch
45|ROBUST_CHANNEL_PREEMPTIVE_REMOVAL|WORKFLOW_XID_45|Preemptive cleanup, due to previous errors
46|ROBUST_CHANNEL_GPU_TIMEOUT_ERROR|RESET_GPU|GPU stopped processing
48|ROBUST_CHANNEL_GPU_ECC_DBE|WORKFLOW_XID_48|Double Bit ECC Error
54|SILENT_RUNNING_PWR_REDUCED_CLOCKING|CHECK_MECHANICALS|Auxiliary power is not connected to the GPU board
60|ROBUST_CHANNEL_SEC2_ERROR|RESTART_APP|Video processor exception
61|PMU_BREAKPOINT|CONTACT_SUPPORT|PMU Breakpoint (non-fatal)
62|PMU_HALT_ERROR|RESET_GPU|Internal micro-controller halt (newer drivers)
63|INFOROM_DRAM_RETIREMENT_EVENT|IGNORE|GPU memory remapping event
64|INFOROM_DRAM_RETIREMENT_FAILURE|RESET_GPU|GPU memory remapping failure
66|ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION|IGNORE|Illegal access by driver
67|ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION|IGNORE|Illegal access by driver
68|ROBUST_CHANNEL_NVDEC0_ERROR|RESTART_APP|NVDEC0 Exception
69|ROBUST_CHANNEL_GR_CLASS_ERROR|RESTART_APP|Graphics Engine class error
70|ROBUST_CHANNEL_CE3_ERROR|RESTART_APP|CE3: Unknown Error
71|ROBUST_CHANNEL_CE4_ERROR|RESTART_APP|CE4: Unknown Error
72|ROBUST_CHANNEL_CE5_ERROR|RESTART_APP|CE5: Unknown Error
74|NVLINK_ERROR|WORKFLOW_NVLINK_ERR|NVLINK Error
75|ROBUST_CHANNEL_CE6_ERROR|RESTART_APP|CE6: Unknown Error
76|ROBUST_CHANNEL_CE7_ERROR|RESTART_APP|CE7: Unknown Error
77|ROBUST_CHANNEL_CE8_ERROR|RESTART_APP|CE8: Unknown Error
78|VGPU_START_ERROR|UPDATE_SWFW|vGPU Start Error
79|ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS|RESTART_BM|GPU has fallen off the bus
80|PBDMA_PUSHBUFFER_CRC_MISMATCH|RESTART_APP|Corrupted data sent to GPU
82|ROBUST_CHANNEL_NVJPG0_ERROR|RESTART_APP|NVJPG0 Error
83|ROBUST_CHANNEL_NVDEC1_ERROR|RESTART_APP|NVDEC1 Error
84|ROBUST_CHANNEL_NVDEC2_ERROR|RESTART_APP|NVDEC2 Error
85|ROBUST_CHANNEL_CE9_ERROR|RESTART_APP|CE9: Unknown Error
86|ROBUST_CHANNEL_OFA0_ERROR|RESTART_APP|OFA Exception
88|ROBUST_CHANNEL_NVDEC3_ERROR|RESTART_APP|NVDEC3 Error
89|ROBUST_CHANNEL_NVDEC4_ERROR|RESTART_APP|NVDEC4 Error
92|EXCESSIVE_SBE_INTERRUPTS|IGNORE|High single-bit ECC error rate
93|INFOROM_ERASE_LIMIT_EXCEEDED|IGNORE|Non-fatal violation of provisioned InfoROM wear limit
94|ROBUST_CHANNEL_CONTAINED_ERROR|RESTART_APP|Contained memory error
95|ROBUST_CHANNEL_UNCONTAINED_ERROR|RESET_GPU|Uncontained memory error
96|ROBUST_CHANNEL_NVDEC5_ERROR|RESTART_APP|NVDEC5 Error
97|ROBUST_CHANNEL_NVDEC6_ERROR|RESTART_APP|NVDEC6 Error
98|ROBUST_CHANNEL_NVDEC7_ERROR|RESTART_APP|NVDEC7 Error
99|ROBUST_CHANNEL_NVJPG1_ERROR|RESTART_APP|NVJPG1 Error
100|ROBUST_CHANNEL_NVJPG2_ERROR|RESTART_APP|NVJPG2 Error
101|ROBUST_CHANNEL_NVJPG3_ERROR|RESTART_APP|NVJPG3 Error
102|ROBUST_CHANNEL_NVJPG4_ERROR|RESTART_APP|NVJPG4 Error
103|ROBUST_CHANNEL_NVJPG5_ERROR|RESTART_APP|NVJPG5 Error
104|ROBUST_CHANNEL_NVJPG6_ERROR|RESTART_APP|NVJPG6 Error
105|ROBUST_CHANNEL_NVJPG7_ERROR|RESTART_APP|NVJPG7 Error
106|SMBPBI_TEST_MESSAGE|IGNORE|SMBPBI Test Message
107|SMBPBI_TEST_MESSAGE_SILENT|IGNORE|SMBPBI Test Message Silent
108|NVLINK_REMOTE_TRANSLATION_ERROR|IGNORE|NVLINK_REMOTE_TRANSLATION_ERROR
109|ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR|RESET_GPU|Context Switch Timeout Error
110|SEC_FAULT_ERROR|RESET_GPU|Security Fault Error
119|GSP_RPC_TIMEOUT|RESET_GPU|GSP RPC Timeout
120|GSP_ERROR|RESET_GPU|GSP Error
121|C2C_ERROR|IGNORE|C2C Error
122|SPI_PMU_RPC_READ_FAIL|CONTACT_SUPPORT|SPI_PMU_RPC_READ_FAIL
123|SPI_PMU_RPC_WRITE_FAIL|CONTACT_SUPPORT|SPI_PMU_RPC_WRITE_FAIL
126|ROBUST_CHANNEL_CE10_ERROR|RESTART_APP|CE10: Unknown Error
127|ROBUST_CHANNEL_CE11_ERROR|RESTART_APP|CE11: Unknown Error
128|ROBUST_CHANNEL_CE12_ERROR|RESTART_APP|CE12: Unknown Error
129|ROBUST_CHANNEL_CE13_ERROR|RESTART_APP|CE13: Unknown Error
130|ROBUST_CHANNEL_CE14_ERROR|RESTART_APP|CE14: Unknown Error
131|ROBUST_CHANNEL_CE15_ERROR|RESTART_APP|CE15: Unknown Error
132|ROBUST_CHANNEL_CE16_ERROR|RESTART_APP|CE16: Unknown Error
133|ROBUST_CHANNEL_CE17_ERROR|RESTART_APP|CE17: Unknown Error
134|ROBUST_CHANNEL_CE18_ERROR|RESTART_APP|CE18: Unknown Error
135|ROBUST_CHANNEL_CE19_ERROR|RESTART_APP|CE19: Unknown Error
136|ALI_TRAINING_FAIL|RESET_GPU|Link Training Failed
137|NVLINK_PRIV_ERR|IGNORE|NVLink Privilege Error
139|ROBUST_CHANNEL_OFA1_ERROR|RESTART_APP|OFA1 Error
140|UNRECOVERABLE_ECC_ERROR_ESCAPE|RESET_GPU|ECC Unrecovered Error
141|ROBUST_CHANNEL_FAST_PATH_ERROR|IGNORE|CUDA Fast Path Error
142|ROBUST_CHANNEL_NVENC3_ERROR|CONTACT_SUPPORT|NVENC3 Error
143|GPU_INIT_ERROR|RESET_GPU|GPU Initialization Error
144|NVLINK_SAW_ERROR|WORKFLOW_NVLINK5_ERR|NVLINK: SAW Error
145|NVLINK_RLW_ERROR|WORKFLOW_NVLINK5_ERR|NVLINK: RLW Error
146|NVLINK_TLW_ERROR|WORKFLOW_NVLINK5_ERR|NVLINK: TLW Error
147|NVLINK_TREX_ERROR|WORKFLOW_NVLINK5_ERR|NVLINK: TREX Error
148|NVLINK_NVLPW_CTRL_ERROR|WORKFLOW_NVLINK5_ERR|NVLINK: NVLPW_CTRL Error
149|NVLINK_NETIR_ERROR|WORKFLOW_NVLINK5_ERR|NVLINK: NETIR Error
150|NVLINK_MSE_ERROR|WORKFLOW_NVLINK5_ERR|NVLINK: MSE Error
151|ROBUST_CHANNEL_KEY_ROTATION_ERROR|RESTART_VM|Key rotation Error
154|GPU_RECOVERY_ACTION_CHANGED|XID_154|GPU Recovery Action Changed
155|NVLINK_SW_DEFINED_ERROR|RESET_GPU|NVLINK: SW Defined Error
156|RESOURCE_RETIREMENT_EVENT|RESET_GPU|Resource Retirement Event
157|RESOURCE_RETIREMENT_FAILURE|IGNORE|Resource Retirement Failure
158|GPU_FATAL_TIMEOUT|RESET_GPU|GPU Fatal Timeout
159|ROBUST_CHANNEL_CHI_NON_DATA_ERROR|CHECK_UVM|CHI Non-Data Error
160|CHANNEL_RETIREMENT_EVENT|IGNORE|Channel Retirement Event
161|CHANNEL_RETIREMENT_FAILURE|IGNORE|Channel Retirement Failure
162|PSHC_REENGAGED||Power Smoothing HW Circuitry capability reengaged
163|PSHC_DISENGAGED||Power Smoothing HW Circuitry capability disengaged
164|PSHC_LOW_LIFETIME||Power Smoothing HW Circuitry low lifetime reached
165|PSHC_ZERO_LIFETIME||Power Smoothing HW Circuitry lifetime exhausted
166|NVLINK_SECURE_CRYPTO_ERR||CC traffic seen prior to link properly being configured for encrypted traffic
167|PCIE_FATAL_TIMEOUT||PCIE_FATAL_TIMEOUT
168|REDUCED_GPU_MEMORY_CAPACITY||Errors found in WPR (write protected region)
169|SEC2_HALT_ERROR||Internal micro-controller halt
170|NVLINK_SECURE_OTHER||Interrupt seen in CC mode
171|UNCORRECTABLE_DRAM_ERROR||UNCORRECTABLE_DRAM_ERROR
172|UNCORRECTABLE_SRAM_ERROR||UNCORRECTABLE_SRAM_ERROR
"""

# Where an entry's action differs from its bucket's, or the catalog's trigger text or another source
# adds something worth reading at 3 a.m.: code -> (action or None to keep the bucket's, note).
_NOTES = {
    13: (None, "investigatory WORKFLOW_XID_13; k8s-device-plugin: application error"),
    31: (None, "investigatory WORKFLOW_XID_31; k8s-device-plugin: application error"),
    32: (None, "trigger text: mostly PCIe quality, generally not the application"),
    43: ("app", "trigger text: a user application error, the GPU stays healthy; "
                "k8s-device-plugin: application error"),
    45: (None, "trigger text: the application was aborted (Ctrl-C, GPU reset, SIGKILL); "
               "k8s-device-plugin: application error"),
    48: (None, "a GPU reset or node reboot clears it; SRAM over its threshold: RMA flow (investigatory)"),
    61: (None, "catalog: Unused on A100/H100/B100/GB200; name from nverror.h"),
    63: (None, "the remapped row takes effect at the next GPU reset"),
    68: (None, "k8s-device-plugin: application error"),
    94: (None, "trigger text: only the application is hit; reset the GPU when convenient"),
    108: (None, "catalog: description Unused; investigatory XID_137_FLOW"),
    109: (None, "k8s-device-plugin ignores it as an application error; the catalog says RESET_GPU"),
    110: (None, "trigger text: if it persists, cold reset the system"),
    122: (None, "catalog: Unused on A100/H100/B100/GB200"),
    123: (None, "catalog: Unused on A100/H100/B100/GB200"),
    137: ("app", "trigger text: typically an application-level bug (illegal NVLink peer access)"),
    171: (None, "catalog: details to an Xid 48, telling DRAM from SRAM"),
    172: (None, "catalog: details to an Xid 48, telling DRAM from SRAM"),
}


@dataclass(frozen=True)
class XidEntry:
    code: int | None  # None: a driver message that is no Xid
    name: str        # NVIDIA's description of the code
    action: str      # one of ACTIONS: what the node needs when this code is logged
    source: str      # where `action` comes from
    mnemonic: str = ""  # the driver's name for it (nverror.h), "" when unknown


def _entry(code: int, mnemonic: str, bucket: str, name: str) -> XidEntry:
    action, why = BUCKET_ACTIONS[bucket]
    override, note = _NOTES.get(code, (None, ""))
    source = f"NVIDIA Xid catalog: {bucket or 'no bucket'}, {why}"
    if note:
        source += f"; {note}"
    return XidEntry(code, name, override or action, source, mnemonic)


def _load_catalog(rows: str) -> dict[int, XidEntry]:
    catalog = {}
    for row in rows.strip().splitlines():
        code, mnemonic, bucket, name = row.split("|")
        catalog[int(code)] = _entry(int(code), mnemonic, bucket, name)
    return catalog


CATALOG: dict[int, XidEntry] = _load_catalog(_CATALOG_ROWS)


def lookup(code: int) -> XidEntry:
    """The catalog's entry for `code`; an "info" entry naming it unknown when the catalog lacks it."""
    entry = CATALOG.get(code)
    if entry is not None:
        return entry
    return XidEntry(code, f"unknown XID {code}", "info",
                    "not in the NVIDIA Xid catalog as kept here: no action documented")


def worse(a: str, b: str) -> str:
    """The more disruptive of two actions."""
    return a if ACTIONS.index(a) >= ACTIONS.index(b) else b


# -- actions carried in the message itself --------------------------------------------------------

_RECOVERY = re.compile(r"recovery action changed from 0x[0-9a-fA-F]+ \([^)]*\) "
                       r"to 0x(?P<number>[0-9a-fA-F]+) \((?P<label>[A-Za-z0-9 /_-]*)\)")
# Xid 154's labels (the catalog's list) and NVML's numbers for the same actions.
RECOVERY_LABELS = {
    "none": "info",
    "gpu reset required": "reset_gpu",
    "node reboot required": "reboot",
    "drain p2p": "drain",
    "drain and reset": "reset_gpu",
}
RECOVERY_NUMBERS = {0: "info", 1: "reset_gpu", 2: "reboot", 3: "drain", 4: "reset_gpu"}

# Xid 144-150: "<subcode> <Fatal|Nonfatal> XC<n> i<n> Link <n> (<intrInfo> <errorStatus> ...)".
_NVLINK5 = re.compile(r"(?P<subcode>[A-Z][A-Z0-9_]*(?:/[A-Z][A-Z0-9_]*)?)\s+(?P<severity>Fatal|Nonfatal)\b")
NVLINK5_CODES = range(144, 151)


def recovery_action(message: str) -> tuple[str, str, str] | None:
    """Xid 154's message -> (action, label, why), None when the message is not in that shape."""
    m = _RECOVERY.search(message)
    if m is None:
        return None
    label, number = m["label"].strip(), int(m["number"], 16)
    if label.lower() in RECOVERY_LABELS:
        return RECOVERY_LABELS[label.lower()], label, f"Xid 154 says {label!s}"
    if number in RECOVERY_NUMBERS:
        # A newer driver's wording for one of NVML's actions ("OS Reboot" for 0x2): trust the number.
        return (RECOVERY_NUMBERS[number], label,
                f"Xid 154 says {label} (0x{number:x}: NVML's nvmlDeviceGpuRecoveryAction_t)")
    return "info", label, f"Xid 154 says {label} (0x{number:x}): not documented, information"


def nvlink_action(message: str) -> tuple[str, str, str] | None:
    """Xid 144-150's message -> (action, "<subcode> <severity>", why), None when not in that shape.

    The catalog's "XID 144-150 Decode" resolves each (subcode, intrInfo, errorStatus) row; every
    Fatal and Link Fatal row is RESET_GPU but two Xid 149 NETIR_LINK_DOWN ones (IGNORE), and every
    Non-fatal row is IGNORE or XID_154_EVAL (do what an accompanying Xid 154 says). So the severity
    word the driver prints decides here, and the Xid 154 that accompanies a non-fatal error that
    needs action carries that action itself.
    """
    m = _NVLINK5.match(message)
    if m is None:
        return None
    detail = f"{m['subcode']} {m['severity']}"
    if m["severity"] == "Fatal":
        return "reset_gpu", detail, "XID 144-150 Decode: Fatal rows are RESET_GPU"
    return "info", detail, "XID 144-150 Decode: Nonfatal rows are IGNORE or follow an accompanying Xid 154"


# -- the driver's messages that are not Xids ------------------------------------------------------

def _as_xid(code: int, name: str, where: str) -> XidEntry:
    """An entry for a driver message that reports what Xid `code` reports, printed without the Xid:
    the code's action, and why."""
    base = CATALOG[code]
    return XidEntry(None, name, base.action, f"{where}, no Xid line: as Xid {code} ({base.name}); {base.source}")


# The open kernel modules' (open-gpu-kernel-modules 595.45.04) messages for a GPU the node cannot use,
# printed where no Xid is. NV_DEV_PRINTF (kernel-open/common/inc/os-interface.h) writes
# "NVRM: GPU %04x:%02x:%02x.%x: " before the text.
# - src/nvidia/arch/nvalloc/unix/src/osapi.c, at probe, when the GPU's registers read all ones:
#   "NVRM: The NVIDIA GPU %04x:%02x:%02x.%x\nNVRM: (PCI ID: %04x:%04x) installed in this system has\n
#   NVRM: fallen off the bus and is not responding to commands.\n" (one record, three lines).
# - src/nvidia/arch/nvalloc/unix/src/osinit.c, osHandleGpuLost: "GPU has fallen off the bus." after the
#   Xid 79 when asked to emit it, alone when not.
# - osinit.c, RmInitAdapter: "RmInitAdapter failed! (0x%x:0x%x:%d)" (init status, RM status, line);
#   Xid 143 (GPU_INIT_ERROR) is printed for some of these failures (kern_fsp_gh100.c), not for all.
LOST_AT_PROBE = _as_xid(79, "GPU has fallen off the bus at driver load (no Xid)",
                        "the driver's probe found the GPU not responding (osapi.c)")
LOST = _as_xid(79, "GPU has fallen off the bus (no Xid)", "the driver lost the GPU (osinit.c osHandleGpuLost)")
INIT_FAILED = _as_xid(143, "GPU initialization failed (RmInitAdapter, no Xid)",
                      "the driver could not initialize the GPU (osinit.c RmInitAdapter)")

_ADDRESS = r"(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<device>[0-9a-fA-F]{2})"
# A line break inside one record: a newline (the next line, indented or with its own prefix), or
# rsyslog's escape of it ("#012", "\012": $EscapeControlCharactersOnReceive, on by default).
_BREAK = r"(?:\s|[#\\]012)+"
_PROBE_START = re.compile(rf"NVRM: The NVIDIA GPU {_ADDRESS}\.[0-7]")
_PROBE = re.compile(rf"NVRM: The NVIDIA GPU {_ADDRESS}\.[0-7]{_BREAK}NVRM: \(PCI ID: [0-9a-fA-F]{{4}}:"
                    rf"[0-9a-fA-F]{{4}}\) installed in this system has{_BREAK}NVRM: fallen off the bus and "
                    r"is not responding to commands\.")
_ONE_LINE = (
    (re.compile(rf"NVRM: GPU {_ADDRESS}\.[0-7]: GPU has fallen off the bus\."), LOST),
    (re.compile(rf"NVRM: GPU {_ADDRESS}\.[0-7]: RmInitAdapter failed! \((?P<status>[0-9a-fA-Fx:]+)\)"), INIT_FAILED),
)
PROBE_LINES = 3  # the probe's message: one record over three lines


# -- one kernel-log line --------------------------------------------------------------------------

# What tools print before a kernel message, in any order and combination:
#   <3>                                    dmesg -r
#   kern  :err   :                         dmesg -x / --decode
#   2025-01-21T04:41:44,285060+00:00       dmesg --time-format iso; journalctl -o short-iso(-precise),
#                                          rsyslog's RFC 3339 stamp; "Tue 2025-01-21 04:41:44 UTC": short-full
#   Jan 21 04:41:44[.285060]               journalctl (short, short-precise), syslog
#   [Tue Jan 21 04:41:44 2025]             dmesg -T / --time-format ctime
#   [Jan21 04:41]  [  +0.000089]           dmesg --time-format reltime
#   [<    0.000089>]                       dmesg --time-format delta
#   [ 1843.308145]  [ 1843.308145 <    0.000089>]   dmesg, -d; journalctl -o short-monotonic; kern.log
#   1737434504.285060                      journalctl -o short-unix
#   node01 kernel:  kernel:                journalctl, syslog
#   [ T1946]                               printk caller id (CONFIG_PRINTK_CALLER)
# Only the monotonic one ([seconds.micros], the kernel's own clock) places a line against the cursor.
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TOKEN = re.compile(
    r"(?:<\d{1,3}>"
    r"|[a-z]+\s*:[a-z]+\s*:"
    rf"|(?:{_DAY}\s+)?\d{{4}}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d|\s+[A-Z]{{2,5}}(?=\s))?"
    rf"|{_MONTH}\s+\d{{1,2}}\s+\d\d:\d\d:\d\d(?:\.\d+)?"
    rf"|\[{_DAY}\s+{_MONTH}\s+\d{{1,2}}\s+\d\d:\d\d:\d\d\s+\d{{4}}\]"
    rf"|\[{_MONTH}\d\d\s+\d\d:\d\d\]|\[\s*\+\d+\.\d+\]|\[<\s*\d+\.\d+>\]"
    r"|\[\s*(?P<seconds>\d+)\.(?P<fraction>\d{1,9})(?:\s*<\s*\d+\.\d+>)?\]"
    r"|\d{9,}\.\d{6}"
    r"|(?:[\w.-]+\s+)?kernel:"
    r"|\[\s*[TC]\d+\])\s*")

# What a log prefix never holds, and a message that quotes another does (an audit record's
# name="...", a key=value line, a shell transcript): the driver's text after one of these is quoted,
# not printed by the driver, and is no event.
_QUOTED = re.compile(r"[\"'`=$]")

# krcReportXid's format; the domain is %04x of a value that may be wider, the ".0" function and the
# MIG instance parts are optional, and the oldest drivers print no "PCI:".
_XID = re.compile(
    rf"NVRM: Xid \((?:PCI:)?{_ADDRESS}"
    r"(?:\.[0-7])?(?P<instance>(?: GPU-C?I:\d{1,3})*)\): (?P<code>\d{1,5})(?:,\s*(?P<rest>.*))?$")
_PID = re.compile(r"pid=(?P<pid>'?<unknown>'?|\d+)(?:,\s*|$)")
_NAME = re.compile(r"name=(?P<name>.*?)(?:,\s+|,$|$)")
_UNKNOWN = {"<unknown>", "'<unknown>'"}
# krcReportXid appends " caused by previous Xid %d" to an Xid 45 whose cause it knows.
_CAUSE = re.compile(r"\bcaused by previous Xid (?P<cause>\d{1,5})$")


@dataclass(frozen=True)
class XidEvent:
    pci: str                 # "0000:18:00": domain:bus:device, lower case
    code: int | None         # the Xid; None for a driver message that is no Xid (LOST, INIT_FAILED, ...)
    pid: int | None          # the channel's process, where the driver knew it
    process: str | None      # its name as the driver printed it: untrusted text
    message: str             # what follows code, pid and name; the driver's words for a message
    entry: XidEntry
    action: str              # what this event calls for: the entry's, or the one its message names
    why: str                 # where `action` comes from
    detail: str              # Xid 154's recovery label, Xid 144-150's "<subcode> <severity>", Xid 45's
                             # cause, RmInitAdapter's status, or ""
    line: str                # the (first) line as read
    text: str                # the driver's text from "NVRM:" (a record's lines joined)
    monotonic_us: int | None  # the kernel's stamp in microseconds since boot, where the line has one
    instance: str = ""       # "GPU-I:01 GPU-CI:00" on a MIG GPU

    @property
    def title(self) -> str:
        """The code's name, with what the message adds: "GPU Recovery Action Changed: Drain P2P"."""
        return f"{self.entry.name}: {self.detail}" if self.detail else self.entry.name

    @property
    def label(self) -> str:
        """"Xid 79 (GPU has fallen off the bus)"; a message that is no Xid by its title alone."""
        return f"Xid {self.code} ({self.title})" if self.code is not None else self.title

    def reason(self, limit: int | None = None) -> str:
        """The kernel message (from "NVRM:"), cleaned for a Slurm drain reason; the log's own prefix
        (time, host) is left out: Slurm records both, and they would spend the length limit."""
        return clean_reason(self.text, limit)


@dataclass(frozen=True)
class _Line:
    text: str
    start: int               # where the message starts, after the prefix
    stamp: int | None        # its own monotonic stamp, in microseconds
    continued: bool          # an indented line with no prefix: the next line of the record above


def _read_line(text: str) -> _Line:
    lead = len(text) - len(text.lstrip())
    pos, stamp = lead, None
    while (m := _TOKEN.match(text, pos)) and m.end() > pos:
        if m["seconds"] is not None and stamp is None:
            stamp = int(m["seconds"]) * 1_000_000 + int(m["fraction"][:6].ljust(6, "0"))
        pos = m.end()
    return _Line(text, pos, stamp, lead > 0 and pos == lead and pos < len(text))


def _find(pattern: re.Pattern, line: _Line) -> re.Match | None:
    """`pattern` in the line's message, unless what precedes it there shows it quoted (_QUOTED)."""
    m = pattern.search(line.text, line.start)
    if m is None or _QUOTED.search(line.text, line.start, m.start()):
        return None
    return m


def _pci(m: re.Match) -> str:
    return f"{int(m['domain'], 16):04x}:{m['bus'].lower()}:{m['device'].lower()}"


def _pid_and_name(rest: str) -> tuple[int | None, str | None, str]:
    """Peel "pid=..., name=..., " off the front of what follows the code; older drivers print
    only the pid, or neither."""
    pid = process = None
    m = _PID.match(rest)
    if m is not None:
        pid = None if m["pid"] in _UNKNOWN else int(m["pid"])
        rest = rest[m.end():]
        m = _NAME.match(rest)
        if m is not None:
            process = None if m["name"] in _UNKNOWN else m["name"]
            rest = rest[m.end():]
    return pid, process, rest.strip()


def _caused_by(message: str) -> tuple[str, str, str] | None:
    """An Xid 45 that names its cause -> (action, detail, why): the catalog's WORKFLOW_XID_45 follows
    the other Xid, whose line may be out of this read (before the cursor, or rotated out)."""
    m = _CAUSE.search(message)
    if m is None:
        return None
    cause = lookup(int(m["cause"]))
    return (worse(CATALOG[45].action, cause.action), f"caused by Xid {cause.code}",
            f"Xid 45 follows the Xid that caused it (WORKFLOW_XID_45): Xid {cause.code}, {cause.source}")


def _resolve(entry: XidEntry, message: str) -> tuple[str, str, str]:
    """(action, why, detail) for an event: the message's own action where it carries one."""
    carried = None
    if entry.code == 154:
        carried = recovery_action(message)
    elif entry.code in NVLINK5_CODES:
        carried = nvlink_action(message)
    elif entry.code == 45:
        carried = _caused_by(message)
    if carried is None:
        return entry.action, entry.source, ""
    action, detail, why = carried
    return action, why, detail


def _xid_event(line: _Line) -> XidEvent | None:
    m = _find(_XID, line)
    if m is None:
        return None
    pid, process, message = _pid_and_name(m["rest"] or "")
    entry = lookup(int(m["code"]))
    action, why, detail = _resolve(entry, message)
    return XidEvent(_pci(m), entry.code, pid, process, message, entry, action, why, detail, line.text,
                    line.text[m.start():], line.stamp, m["instance"].strip())


def _message_event(first: _Line, m: re.Match, entry: XidEntry, detail: str = "") -> XidEvent:
    # The driver's words, one "NVRM:" before them rather than one per line of the record.
    words = re.sub(rf"{_BREAK}NVRM: ", " ", m[0]).removeprefix("NVRM: ")
    return XidEvent(_pci(m), None, None, None, words, entry, entry.action, entry.source, detail, first.text,
                    f"NVRM: {words}", first.stamp)


def _event_at(lines: list[_Line], i: int) -> tuple[XidEvent | None, int]:
    """The event that starts at lines[i], if any, and the index of its last line."""
    line = lines[i]
    if "NVRM: " not in line.text:  # every pattern starts so: most lines are done here
        return None, i
    event = _xid_event(line)
    if event is not None:
        return event, i
    for pattern, entry in _ONE_LINE:
        m = _find(pattern, line)
        if m is not None:
            status = m.groupdict().get("status")
            return _message_event(line, m, entry, f"status {status}" if status else ""), i
    start = _find(_PROBE_START, line)
    if start is not None:
        # The record's next lines: indented under it (dmesg, journalctl), or each with the record's
        # prefix (syslog(2) and /proc/kmsg print one per line: rsyslog's imklog), or one line, escaped
        # (rsyslog). Read again on their own, they match no pattern: the event is the first line's.
        pieces = [line.text[start.start():], *(ln.text[ln.start:].strip() for ln in lines[i + 1:i + PROBE_LINES])]
        m = _PROBE.match(" ".join(pieces))
        if m is not None:
            ends = itertools.accumulate(len(piece) + 1 for piece in pieces)  # each piece's end, joined
            last = i + next(k for k, end in enumerate(ends) if m.end() < end)
            return _message_event(line, m, LOST_AT_PROBE), last
    return None, i


def parse_line(line: str) -> XidEvent | None:
    """One kernel-log line -> its event, or None when it is not one. A message printed over several
    lines (the probe's "fallen off the bus") is found by parse_events, or here in rsyslog's one-line
    form."""
    return _event_at([_read_line(line)], 0)[0]


def _lines(text: str) -> list[_Line]:
    # Split on newlines only: a carriage return or other control character inside a message stays in
    # that line (and is cleaned out of any drain reason), rather than making a line of its own.
    return [_read_line(ln[:-1] if ln.endswith("\r") else ln) for ln in text.split("\n")]


def _events(lines: list[_Line]) -> list[tuple[int, int, XidEvent]]:
    """Every event, with the indices of its first and last lines, in log order."""
    found, fell_off = [], set()
    for i in range(len(lines)):
        event, last = _event_at(lines, i)
        if event is None:
            continue
        if event.code == 79:
            fell_off.add(event.pci)
        elif event.entry is LOST and event.pci in fell_off:
            continue  # osHandleGpuLost prints it after the Xid 79 it emits: the same loss, once
        found.append((i, last, event))
    return found


def parse_events(text: str) -> list[XidEvent]:
    """Every event in a kernel log (Xids, and the driver's messages that are no Xid), in log order."""
    return [event for _, _, event in _events(_lines(text))]


# -- since the last check -------------------------------------------------------------------------

TAIL_LINES = 8  # how many of a stampless log's last lines the cursor remembers


@dataclass(frozen=True)
class Cursor:
    """Where the previous check stopped: the newest monotonic stamp it saw, in microseconds since
    boot, how many lines carried that stamp, and the boot; for a log without monotonic stamps, the
    identities of its last lines instead (`tail`)."""
    boot_id: str = ""
    monotonic_us: int = -1
    at_stamp: int = 0
    tail: tuple[str, ...] = ()

    def dumps(self) -> str:
        return json.dumps({"boot_id": self.boot_id, "monotonic_us": self.monotonic_us,
                           "at_stamp": self.at_stamp, "tail": list(self.tail)})

    @classmethod
    def loads(cls, text: str) -> Cursor | None:
        """A dumped cursor, or None when the text is not one (a first run reads the whole log). One
        dumped before `tail` existed has none."""
        try:
            raw = json.loads(text)
            tail = raw.get("tail", [])
            if not isinstance(tail, list) or not all(isinstance(key, str) for key in tail):
                return None
            return cls(str(raw["boot_id"]), int(raw["monotonic_us"]), int(raw["at_stamp"]), tuple(tail))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def _same_boot(cursor: Cursor | None, boot_id: str, newest: int | None) -> bool:
    if cursor is None:
        return False
    if boot_id and cursor.boot_id and boot_id != cursor.boot_id:
        return False
    # The clock went back: a reboot that no boot id showed.
    return newest is None or newest >= cursor.monotonic_us


def _stamps(lines: list[_Line]) -> list[int | None]:
    """Each line's monotonic stamp; a record's indented next lines carry its first line's."""
    stamps, last = [], None
    for line in lines:
        last = last if line.continued else line.stamp
        stamps.append(last)
    return stamps


def _after_stamp(stamps: list[int | None], start: Cursor | None) -> list[bool]:
    """Which lines are new by their stamp: later than the cursor's, or at it beyond the lines it
    counted there (lines printed in the same microsecond may straddle a read). A line without a
    stamp cannot be placed and counts as new: an event reported twice is better than never."""
    fresh, at_start = [], 0
    for stamp in stamps:
        if start is None or stamp is None or stamp > start.monotonic_us:
            fresh.append(True)
        elif stamp < start.monotonic_us:
            fresh.append(False)
        else:
            at_start += 1
            fresh.append(at_start > start.at_stamp)
    return fresh


def _identity(line: _Line) -> str:
    # The line without the fractions of its time stamps: dmesg prints the wall clock from the boot time
    # it works out at each run, whose microseconds differ from one run to the next.
    key = re.sub(r"[.,]\d+", "", line.text[:line.start]) + line.text[line.start:]
    return hashlib.sha256(key.encode("utf-8", "backslashreplace")).hexdigest()[:16]


def _after_tail(keys: list[tuple[int, str]], tail: tuple[str, ...]) -> int:
    """The index of the first line after the earliest place where the previous read's last lines
    stand in this one, in the same order; 0 (every line new) where they stand nowhere (a boot, a
    rotation past them, or stamps printed differently). The earliest place: a repeat of those lines
    may make old lines new again, never a new line old."""
    if not tail:
        return 0
    hashes = [key for _, key in keys]
    for j in range(len(hashes) - len(tail) + 1):
        if tuple(hashes[j:j + len(tail)]) == tail:
            return keys[j + len(tail) - 1][0] + 1
    return 0


def new_events(text: str, cursor: Cursor | None = None, boot_id: str = "") -> tuple[list[XidEvent], Cursor]:
    """The events in `text` the check that returned `cursor` has not seen, and the cursor to pass next
    time. `boot_id` is this boot's (read_boot_id()); "" when unknown. With no cursor, or another
    boot's, every event in the text is new. A log with monotonic stamps is placed by them; one without
    any (dmesg -T or --time-format iso, journalctl -o short or short-iso, kern.log without the
    kernel's stamp) by its last lines, which the cursor keeps."""
    lines = _lines(text)
    stamps = _stamps(lines)
    newest = max((s for s in stamps if s is not None), default=None)
    start = cursor if _same_boot(cursor, boot_id, newest) else None
    boot = boot_id or (start.boot_id if start is not None else "")
    # An event is new where any of its lines is: a read may have ended inside a record whose lines
    # were written one by one (rsyslog's kern.log), before the record was whole and an event.
    found = _events(lines)
    if newest is not None:
        fresh = _after_stamp(stamps, start)
        return ([e for first, last, e in found if any(fresh[first:last + 1])],
                Cursor(boot, newest, stamps.count(newest)))
    keys = [(i, _identity(line)) for i, line in enumerate(lines) if line.text.strip()]
    if not keys:  # nothing read: the cursor stays
        return [], replace(start, boot_id=boot) if start is not None else Cursor(boot)
    first_new = _after_tail(keys, start.tail if start is not None else ())
    return ([e for _, last, e in found if last >= first_new],
            Cursor(boot, tail=tuple(key for _, key in keys[-TAIL_LINES:])))


# -- reading the log ------------------------------------------------------------------------------

def poll(cursor: Cursor | None = None, timeout: float = kernellog.TIMEOUT) -> tuple[list[XidEvent], Cursor]:
    """The Xid events logged since `cursor`, and the next cursor; kernellog.KernelLogError when the log
    cannot be read (the cursor then stays where it was)."""
    return new_events(kernellog.read_kernel_log(timeout), cursor, kernellog.read_boot_id())


# -- what the node needs --------------------------------------------------------------------------

@dataclass(frozen=True)
class XidSummary:
    worst: str | None        # the most disruptive action any event calls for; None without events
    lines: tuple[str, ...]   # one per GPU, by PCI address


def _gpu_line(pci: str, events: list[XidEvent]) -> str:
    # The GPU's worst event names the line (the first of equals, in log order); its others follow.
    top = events[0]
    for event in events[1:]:
        if ACTIONS.index(event.action) > ACTIONS.index(top.action):
            top = event
    line = f"GPU {pci}: {top.label}: {', '.join(STEPS[top.action])}"
    codes = sorted({e.code for e in events if e.code is not None} - {top.code})
    messages = sorted({e.entry.name for e in events if e.code is None} - {top.entry.name})
    others = ([f"Xid {', '.join(map(str, codes))}"] if codes else []) + messages
    if others:
        line += f" (also {'; '.join(others)})"
    return line


def summarize(events: Iterable[XidEvent]) -> XidSummary:
    """The worst action among `events` and one line per GPU, e.g.
    "GPU 0000:18:00: Xid 79 (GPU has fallen off the bus): drain, reboot"."""
    by_gpu: dict[str, list[XidEvent]] = {}
    worst = None
    for event in events:
        by_gpu.setdefault(event.pci, []).append(event)
        worst = event.action if worst is None else worse(worst, event.action)
    return XidSummary(worst, tuple(_gpu_line(pci, by_gpu[pci]) for pci in sorted(by_gpu)))
