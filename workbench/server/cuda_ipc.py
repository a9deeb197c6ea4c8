"""CUDA inter-process memory through the NVIDIA driver's own library (``libcuda.so.1``).

What the CUDA shared-memory extension needs from CUDA: open a region another process
allocated (``cudaIpcGetMemHandle``'s 64-byte handle), copy between it and host memory, and
close it. Triton does this with the CUDA runtime (``cudaIpcOpenMemHandle`` with
``cudaIpcMemLazyEnablePeerAccess``); this module calls the driver API underneath it through
``ctypes``, so the server needs no CUDA toolkit or Python CUDA package: the library comes
with the driver and exists exactly where a region can be opened. A runtime handle is a
driver handle (both are the same 64 bytes), and the driver's error strings are the runtime's
for the errors a register meets ("invalid argument" for a handle that names nothing).

Each call makes the device's primary context current on the calling thread for its
duration (the context a CUDA runtime in the same process would use too).

A region cannot be opened in the process that allocated it (the driver answers "invalid
device context"): the client and the server are different processes, as with Triton.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

#: ``sizeof(cudaIpcMemHandle_t)`` (``CUipcMemHandle``)
HANDLE_BYTES = 64
_LAZY_ENABLE_PEER_ACCESS = 1  # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
_SUCCESS = 0


class CudaError(Exception):
    """A driver call failed; the message is the driver's text for its error code."""


class CudaMemory(Protocol):
    """What the shared-memory registry asks of CUDA (``CudaDriver``; tests give a fake)."""

    def open(self, handle: bytes, device_id: int) -> int: ...

    def close(self, pointer: int, device_id: int) -> None: ...

    def allocation_size(self, pointer: int, device_id: int) -> int: ...

    def read(self, pointer: int, size: int, device_id: int) -> bytearray: ...

    def write(self, pointer: int, data: Any, device_id: int) -> None: ...


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * HANDLE_BYTES)]


class CudaDriver:
    """The few driver calls CUDA shared memory makes, on a loaded ``libcuda``."""

    def __init__(self, library: Any) -> None:
        self._lib = library
        self._contexts: dict[int, ctypes.c_void_p] = {}
        self._lock = threading.Lock()
        self._check(library.cuInit(0))
        count = ctypes.c_int(0)
        self._check(library.cuDeviceGetCount(ctypes.byref(count)))
        self.device_count = count.value
        # the _v2 entry points: what cuda.h's unsuffixed names mean since CUDA 11
        self._open = library.cuIpcOpenMemHandle_v2
        self._open.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
        self._to_host = library.cuMemcpyDtoH_v2
        self._to_host.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self._to_device = library.cuMemcpyHtoD_v2
        self._to_device.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self._range = library.cuMemGetAddressRange_v2
        self._range.argtypes = [
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.c_uint64,
        ]
        library.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
        library.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    # -- the calls ------------------------------------------------------------------------------
    def open(self, handle: bytes, device_id: int) -> int:
        """The address, in this process, of the allocation ``handle`` names on ``device_id``."""
        raw = _Handle()  # zeroed: what a shorter handle does not cover stays 0
        ctypes.memmove(ctypes.addressof(raw), handle, min(len(handle), HANDLE_BYTES))
        pointer = ctypes.c_uint64(0)
        with self._current(device_id):
            self._check(self._open(ctypes.byref(pointer), raw, _LAZY_ENABLE_PEER_ACCESS))
        return pointer.value

    def allocation_size(self, pointer: int, device_id: int) -> int:
        """The size of the allocation at ``pointer`` (from ``pointer`` to its end)."""
        base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
        with self._current(device_id):
            self._check(self._range(ctypes.byref(base), ctypes.byref(size), pointer))
        return base.value + size.value - pointer

    def close(self, pointer: int, device_id: int) -> None:
        with self._current(device_id):
            self._check(self._lib.cuIpcCloseMemHandle(pointer))

    def read(self, pointer: int, size: int, device_id: int) -> bytearray:
        """``size`` bytes from device address ``pointer``, copied into host memory."""
        data = bytearray(size)
        if size:
            target = (ctypes.c_char * size).from_buffer(data)
            with self._current(device_id):
                self._check(self._to_host(ctypes.addressof(target), pointer, size))
        return data

    def write(self, pointer: int, data: Any, device_id: int) -> None:
        """Copy the bytes of ``data`` (any buffer) to device address ``pointer``."""
        source = np.frombuffer(data, dtype=np.uint8)
        if source.size:
            with self._current(device_id):
                self._check(self._to_device(pointer, source.ctypes.data, source.size))

    # -- contexts and errors -------------------------------------------------------------------
    @contextmanager
    def _current(self, device_id: int) -> Iterator[None]:
        """The device's primary context, current on this thread for the block."""
        context = self._context(device_id)
        self._check(self._lib.cuCtxPushCurrent_v2(context))
        try:
            yield
        finally:
            popped = ctypes.c_void_p()
            self._lib.cuCtxPopCurrent_v2(ctypes.byref(popped))

    def _context(self, device_id: int) -> ctypes.c_void_p:
        with self._lock:
            context = self._contexts.get(device_id)
            if context is None:
                if not 0 <= device_id < self.device_count:
                    raise CudaError(self._text(101))  # CUDA_ERROR_INVALID_DEVICE
                device = ctypes.c_int(0)
                self._check(self._lib.cuDeviceGet(ctypes.byref(device), device_id))
                context = ctypes.c_void_p()
                self._check(self._lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device))
                self._contexts[device_id] = context
            return context

    def _check(self, code: int) -> None:
        if code != _SUCCESS:
            raise CudaError(self._text(code))

    def _text(self, code: int) -> str:
        text = ctypes.c_char_p()
        if self._lib.cuGetErrorString(code, ctypes.byref(text)) != _SUCCESS or not text.value:
            return f"unknown error {code}"
        return text.value.decode()


@functools.cache
def driver() -> CudaDriver | None:
    """This process's ``CudaDriver``, or ``None`` where there is no NVIDIA driver or GPU
    (looked for once)."""
    try:
        found = CudaDriver(ctypes.CDLL("libcuda.so.1"))
    except (OSError, AttributeError, CudaError):
        return None
    return found if found.device_count else None


__all__ = ["HANDLE_BYTES", "CudaDriver", "CudaError", "CudaMemory", "driver"]
