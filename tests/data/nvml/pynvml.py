"""A stand-in for nvidia-ml-py's pynvml, for a subprocess that must read "GPUs" where there are none:
the GPUs are $FAKE_NVML_GPUS, a JSON list of {"bus": "00000000:19:00.0", "ecc": 0, "rows": [0, 0, 0, 0],
"reasons": 0, "temp": 40}; every call answers as pynvml does (ints, a tuple, a bytes bus id)."""
import json
import os
from types import SimpleNamespace

NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0
NVML_TEMPERATURE_GPU, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 0, 1
nvmlClocksThrottleReasonHwSlowdown, nvmlClocksThrottleReasonSwThermalSlowdown = 0x8, 0x20
nvmlClocksThrottleReasonHwThermalSlowdown, nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x40, 0x80


NVML_ERROR_NOT_SUPPORTED = 3


class NVMLError(Exception):
    """pynvml's: the NVML return code (nvml.h) in .value."""

    def __init__(self, value):
        super().__init__("Not Supported" if value == NVML_ERROR_NOT_SUPPORTED else str(value))
        self.value = value


def _gpus():
    return json.loads(os.environ.get("FAKE_NVML_GPUS", "[]"))


def nvmlInit():
    pass


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(i):
    return _gpus()[i]


def nvmlDeviceGetPciInfo(h):
    return SimpleNamespace(busId=h["bus"].encode())


def nvmlDeviceGetTotalEccErrors(h, kind, counter):
    return h.get("ecc", 0)


def nvmlDeviceGetRemappedRows(h):
    return tuple(h.get("rows", (0, 0, 0, 0)))


def nvmlDeviceGetRetiredPagesPendingStatus(h):
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetCurrentClocksEventReasons(h):
    return h.get("reasons", 0)


def nvmlDeviceGetTemperature(h, sensor):
    return h.get("temp", 40)


def nvmlDeviceGetTemperatureThreshold(h, kind):
    return 87
