"""The gpus check, through NVML (nvidia-ml-py): the count (sysfs, NVML and preflight.gpus_per_node
agree), uncorrectable ECC errors since the driver loaded, rows waiting for a remap or a failed remap,
retired pages pending, clocks held down by the hardware, temperature against the GPU's own slowdown.

NVML's answers are told apart (nvml.h, nvmlReturn_t): NOT_SUPPORTED is a query this GPU does not offer
(nothing to judge); GPU_IS_LOST ("the GPU has fallen off the bus or has otherwise become inaccessible")
and RESET_REQUIRED are the GPU's own failure, so they fail it; any other error means we could not ask,
which is "could not run", never a failure.
"""

from __future__ import annotations

from ..host import nodefacts
from ..rules import judge
from .base import Context, CouldNotRun, Outcome, Problem, bound, error, fails, judged, skip

# nvml.h's nvmlReturn_t, for a pynvml that does not name them (the values are NVML's ABI).
_NOT_SUPPORTED, _GPU_IS_LOST, _RESET_REQUIRED = 3, 15, 16


class GpuFailed(Exception):
    """NVML says the GPU itself failed: lost, or a reset is required."""

    def __init__(self, detail: str, action: str):
        super().__init__(detail)
        self.detail, self.action = detail, action


def _nvml():
    try:
        import pynvml
    except ImportError as e:
        raise nodefacts.Unavailable(f"nvidia-ml-py is not installed ({e}); pip install nvidia-ml-py") from None
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        raise nodefacts.Unavailable(f"NVML: {e}") from None
    return pynvml


def _code(nvml, e: Exception) -> int | None:
    kind = getattr(nvml, "NVMLError", None)
    return getattr(e, "value", None) if isinstance(kind, type) and isinstance(e, kind) else None


def ask(nvml, call, *args):
    """One NVML query: its answer; None where the GPU does not support it; GpuFailed where the GPU is
    lost or needs a reset; CouldNotRun for any other error (ours, not the GPU's)."""
    try:
        return call(*args)
    except Exception as e:  # noqa: BLE001 - sorted below by NVML's return code
        code = _code(nvml, e)
        if code == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED):
            return None
        if code == getattr(nvml, "NVML_ERROR_GPU_IS_LOST", _GPU_IS_LOST):
            raise GpuFailed(f"NVML: the GPU is lost ({e}): it fell off the bus or stopped answering; "
                            f"reboot the node", "reboot") from None
        if code == getattr(nvml, "NVML_ERROR_RESET_REQUIRED", _RESET_REQUIRED):
            raise GpuFailed(f"NVML: the GPU needs a reset ({e})", "reset_gpu") from None
        raise CouldNotRun(f"NVML {getattr(call, '__name__', 'query')}: {type(e).__name__}: {e}") from None


def gpu_problems(nvml, index: int, margin: float) -> tuple[str, list[Problem]]:
    """(the GPU's PCI address, its problems) from NVML: a lost GPU, uncorrectable ECC errors since the
    driver loaded, rows waiting for a remap (a GPU reset) or a remap that failed (RMA), retired pages
    waiting (pre-Ampere), clocks slowed by the hardware (thermal, power brake), temperature."""
    part = f"GPU {index}"
    try:
        h = ask(nvml, nvml.nvmlDeviceGetHandleByIndex, index)
        pci = ask(nvml, nvml.nvmlDeviceGetPciInfo, h).busId
        pci = pci.decode() if isinstance(pci, bytes) else str(pci)
        part = f"GPU {pci}"
        return pci, _health(nvml, h, part, margin)
    except GpuFailed as e:
        return part, [Problem(part, e.detail, action=e.action)]


def _health(nvml, h, part: str, margin: float) -> list[Problem]:
    out = []
    ecc = ask(nvml, nvml.nvmlDeviceGetTotalEccErrors, h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
              nvml.NVML_VOLATILE_ECC)
    if ecc:
        out.append(Problem(part, f"{ecc} uncorrectable ECC errors since the driver loaded", action="reset_gpu"))
    rows = ask(nvml, nvml.nvmlDeviceGetRemappedRows, h)
    if rows is not None:
        _corr, unc, pending, failed = rows
        if failed:
            out.append(Problem(part, "row remapping failed: no spare rows left", action="rma"))
        elif pending:
            out.append(Problem(part, f"row remap pending ({unc} uncorrectable rows): reset the GPU to apply it",
                               action="reset_gpu"))
    if ask(nvml, nvml.nvmlDeviceGetRetiredPagesPendingStatus, h):
        out.append(Problem(part, "retired pages pending: reset the GPU to retire them", action="reset_gpu"))
    reasons_of = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                  or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    reasons = ask(nvml, reasons_of, h)
    hw = {"hardware slowdown": nvml.nvmlClocksThrottleReasonHwSlowdown,
          "hardware thermal slowdown": nvml.nvmlClocksThrottleReasonHwThermalSlowdown,
          "hardware power brake": nvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown}
    slow = [name for name, bit in hw.items() if reasons and reasons & bit]
    if slow:
        out.append(Problem(part, f"clocks held down: {', '.join(slow)}"))
    if reasons and reasons & nvml.nvmlClocksThrottleReasonSwThermalSlowdown:
        out.append(Problem(part, "clocks held down: software thermal slowdown", severity="warn"))
    temp = ask(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
    limit = ask(nvml, nvml.nvmlDeviceGetTemperatureThreshold, h, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    if temp is not None and limit:
        verdict = judge.Headroom(margin).verdict(temp, limit)
        if verdict == judge.FAIL:
            out.append(Problem(part, f"{temp} C, at its slowdown temperature {limit} C"))
        elif verdict == judge.WARN:
            out.append(Problem(part, f"{temp} C, within {margin:g} C of its slowdown temperature {limit} C",
                               severity="warn"))
    return out


def check(ctx: Context, nvml=None) -> Outcome:
    want = bound("gpus", ctx.profile)
    try:
        present = nodefacts.gpu_count(ctx.root)
    except nodefacts.Unavailable as e:
        present, why = 0, e.reason
    else:
        why = "no NVIDIA GPU on this node (no PCI function of vendor 0x10de, class 0x03xx in sysfs)"
    if not present:
        if want:
            return judged("gpus", [Problem("GPUs", f"{why}; the profile expects {want:g}")])
        return skip("gpus", why)
    try:
        nvml = nvml or _nvml()
    except nodefacts.Unavailable as e:
        return error("gpus", f"{present} NVIDIA GPUs in sysfs, but {e.reason}")
    try:
        count = ask(nvml, nvml.nvmlDeviceGetCount)
    except GpuFailed as e:
        return judged("gpus", [Problem("GPUs", e.detail, action=e.action)])
    problems = []
    if count != present or (want and fails("gpus", count, ctx.profile)):
        expected = f"the profile expects {want:g}, " if want else ""
        problems.append(Problem("GPUs", f"NVML sees {count} GPUs, {expected}sysfs lists {present}"))
    margin = ctx.profile.get("node_check.gpu_temperature_margin")
    unchecked = []
    for i in range(count or 0):
        try:
            problems += gpu_problems(nvml, i, margin)[1]
        except CouldNotRun as e:  # this GPU could not be asked: the others are still judged
            unchecked.append(f"GPU {i}: {e}")
    return judged("gpus", problems, f"{count} GPUs", unchecked=unchecked)
