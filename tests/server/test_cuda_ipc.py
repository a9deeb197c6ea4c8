"""``CudaDriver``'s calls into ``libcuda``, against a stand-in library (no GPU needed).

What reaches the driver is checked byte for byte: an IPC handle is 64 arbitrary bytes, zeros
included (a first version passed it as a C string and the driver saw it cut at its first
zero byte: "invalid argument" on the H100), and each call runs in the device's primary
context, pushed and popped around it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pytest

from workbench.server.cuda_ipc import HANDLE_BYTES, CudaDriver, CudaError

#: CUDA_ERROR_INVALID_VALUE, and the driver's text for it
INVALID_VALUE, INVALID_TEXT = 1, b"invalid argument"


class _Function:
    """A driver function: records its arguments, answers with ``body``'s result (0 where it
    returns none)."""

    def __init__(self, body: Any = None) -> None:
        self.body = body
        self.calls: list[tuple[Any, ...]] = []
        self.argtypes: Any = None

    def __call__(self, *args: Any) -> int:
        self.calls.append(args)
        result = None if self.body is None else self.body(*args)
        return 0 if result is None else int(result)


def _out(reference: Any) -> Any:
    """The object a ``ctypes.byref`` argument points to."""
    return reference._obj


class FakeLibcuda:
    """The functions ``CudaDriver`` uses, with one device and one allocation of 256 bytes."""

    def __init__(self) -> None:
        self.opened: list[bytes] = []
        self.current: list[Any] = []
        self.device_memory = bytearray(range(256))
        self.cuInit = _Function()
        self.cuDeviceGetCount = _Function(lambda count: setattr(_out(count), "value", 1))
        self.cuDeviceGet = _Function(lambda device, ordinal: setattr(_out(device), "value", 0))
        self.cuDevicePrimaryCtxRetain = _Function(
            lambda context, device: setattr(_out(context), "value", 0xC0)
        )
        self.cuCtxPushCurrent_v2 = _Function(lambda context: self.current.append(context.value))
        self.cuCtxPopCurrent_v2 = _Function(lambda context: self.current.pop())
        self.cuIpcOpenMemHandle_v2 = _Function(self._open)
        self.cuIpcCloseMemHandle = _Function()
        self.cuMemGetAddressRange_v2 = _Function(self._range)
        self.cuMemcpyDtoH_v2 = _Function(self._to_host)
        self.cuMemcpyHtoD_v2 = _Function(self._to_device)
        self.cuGetErrorString = _Function(self._text)

    def _open(self, pointer: Any, handle: Any, flags: int) -> int:
        assert self.current == [0xC0] and flags == 1  # lazy peer access, as Triton opens
        self.opened.append(bytes(handle.reserved))
        if bytes(handle.reserved) == bytes(HANDLE_BYTES):
            return INVALID_VALUE
        _out(pointer).value = 0x1000
        return 0

    def _range(self, base: Any, size: Any, pointer: int) -> int:
        _out(base).value, _out(size).value = 0x1000, len(self.device_memory)
        return 0

    def _to_host(self, target: int, source: int, size: int) -> int:
        start = source - 0x1000
        ctypes.memmove(target, bytes(self.device_memory[start : start + size]), size)
        return 0

    def _to_device(self, target: int, source: int, size: int) -> int:
        start = target - 0x1000
        self.device_memory[start : start + size] = ctypes.string_at(source, size)
        return 0

    def _text(self, code: int, text: Any) -> int:
        _out(text).value = INVALID_TEXT if code == INVALID_VALUE else b"unknown"
        return 0


@pytest.fixture
def library() -> FakeLibcuda:
    return FakeLibcuda()


def test_a_handle_reaches_the_driver_whole_zero_bytes_included(library: FakeLibcuda) -> None:
    driver = CudaDriver(library)
    handle = bytes([7, 0, 0, 9]) + bytes(59) + b"\xff"
    assert driver.open(handle, 0) == 0x1000
    assert library.opened == [handle]
    assert library.current == []  # the context was popped again


def test_driver_errors_carry_the_drivers_text(library: FakeLibcuda) -> None:
    driver = CudaDriver(library)
    with pytest.raises(CudaError, match="^invalid argument$"):
        driver.open(bytes(HANDLE_BYTES), 0)
    with pytest.raises(CudaError):
        driver.open(b"\x01" * HANDLE_BYTES, 1)  # no second device
    assert library.current == []


def test_copies_and_the_allocation_size(library: FakeLibcuda) -> None:
    driver = CudaDriver(library)
    pointer = driver.open(b"\x01" * HANDLE_BYTES, 0)
    assert driver.allocation_size(pointer + 16, 0) == 240  # from the pointer to the end
    assert driver.read(pointer + 4, 4, 0) == bytearray([4, 5, 6, 7])
    driver.write(pointer + 8, memoryview(b"\xaa\xbb"), 0)
    assert library.device_memory[8:10] == b"\xaa\xbb"
    driver.close(pointer, 0)
    assert library.cuIpcCloseMemHandle.calls == [(pointer,)]
