"""GPU memory a NIC can reach directly (GPUDirect RDMA): page-aligned cupy allocations, dma-buf export.

Rules (CUDA driver API, cuMemGetHandleForAddressRange; docs/rdma.md §4): the range must come
from cuMemAlloc and start and end on host-page boundaries, so a buffer is its own
cupy.cuda.Memory (cudaMalloc, not a pool sub-allocation) rounded up to 2 MiB. Registered
with dma-buf, the region's IOVA is the dma-buf offset (0 here), not the CUDA pointer; with
nvidia_peermem the CUDA pointer itself is registered like host memory.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

GRANULE = 2 << 20  # rounds sizes up so the range ends on a page boundary too
CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1
CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124  # cuda.h, CUDA >= 11.7


class GpuMemError(Exception):
    pass


@dataclass
class GpuBuffer:
    memory: object      # cupy.cuda.Memory: keeps the allocation alive
    ptr: int            # CUDA device pointer
    size: int           # bytes allocated (a multiple of GRANULE)

    def view(self, nbytes: int):
        """A cupy uint8 array over the first nbytes (the buffer stays alive with it)."""
        import cupy
        return cupy.ndarray((max(int(nbytes), 1),), dtype=cupy.uint8,
                            memptr=cupy.cuda.MemoryPointer(self.memory, 0))


def rounded(nbytes: int) -> int:
    return max(-(-int(nbytes) // GRANULE), 1) * GRANULE


def device_buffer(nbytes: int) -> GpuBuffer:
    """A page-aligned device allocation of at least nbytes."""
    import cupy
    size = rounded(nbytes)
    mem = cupy.cuda.Memory(size)
    if mem.ptr % os.sysconf("SC_PAGE_SIZE"):
        raise GpuMemError(f"cudaMalloc returned 0x{mem.ptr:x}, not page-aligned: cannot export it as dma-buf")
    return GpuBuffer(mem, mem.ptr, size)


def _libcuda():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise GpuMemError(f"libcuda.so.1 not loadable: {e}") from None
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def cu_error(lib, rc: int) -> str:
    name = ctypes.c_char_p()
    if lib.cuGetErrorName(rc, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUresult {rc}"


def dmabuf_attribute(device: int = 0) -> bool | None:
    """CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED of `device`; None when the driver cannot say."""
    lib = _libcuda()
    lib.cuInit(0)
    dev, attr = ctypes.c_int(), ctypes.c_int(-1)
    if lib.cuDeviceGet(ctypes.byref(dev), device):
        return None
    if lib.cuDeviceGetAttribute(ctypes.byref(attr), CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev):
        return None
    return bool(attr.value)


def export_dmabuf(buf: GpuBuffer) -> int:
    """A dma-buf file descriptor for the whole buffer; the caller closes it after deregistering."""
    lib = _libcuda()
    try:
        fn = lib.cuMemGetHandleForAddressRange
    except AttributeError:
        raise GpuMemError("the CUDA driver has no cuMemGetHandleForAddressRange (needs CUDA >= 11.7)") from None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_int, ctypes.c_ulonglong]
    fn.restype = ctypes.c_int
    fd = ctypes.c_int(-1)
    rc = fn(ctypes.byref(fd), buf.ptr, buf.size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0)
    if rc or fd.value < 0:
        raise GpuMemError(f"cuMemGetHandleForAddressRange -> {cu_error(lib, rc)} (dma-buf needs the open "
                          "NVIDIA kernel modules; nvidia_peermem is the other GPUDirect path)")
    return fd.value
