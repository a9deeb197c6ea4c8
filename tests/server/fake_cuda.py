"""A stand-in for ``workbench.server.cuda_ipc.CudaDriver`` on machines without a GPU.

"Device memory" is host memory: each allocation is a ``bytearray`` at a made-up device
address, and its IPC handle is 64 bytes naming it. The registry and the front ends call it
exactly as they call the driver, so every step but the copies themselves runs as on a GPU
(``tests/gpu/test_cuda_shared_memory_gpu.py`` runs the real thing).
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from workbench.server.cuda_ipc import HANDLE_BYTES, CudaError

#: where the fake's allocations start, and how far apart they are
_BASE, _STRIDE = 0x7F00_0000_0000, 0x1_0000_0000


class FakeCudaDriver:
    """Allocations in host memory, opened and copied as the driver would."""

    def __init__(self, device_count: int = 1) -> None:
        self.device_count = device_count
        self.memory: dict[int, bytearray] = {}  # base address -> the allocation
        self.opened: dict[int, int] = {}  # base address -> times open
        self.closed: list[int] = []

    # -- the test's side: what a client allocates ----------------------------------------------
    def allocate(self, byte_size: int) -> tuple[bytes, int]:
        """A new allocation: its IPC handle and its address."""
        address = _BASE + len(self.memory) * _STRIDE
        self.memory[address] = bytearray(byte_size)
        return address.to_bytes(8, "little").ljust(HANDLE_BYTES, b"\x01"), address

    def b64(self, handle: bytes) -> str:
        return base64.b64encode(handle).decode()

    def array(self, address: int, dtype: Any = np.float32) -> np.ndarray:
        """A numpy view of the allocation at ``address``."""
        return np.frombuffer(self.memory[address], dtype=dtype)

    # -- the driver's side ---------------------------------------------------------------------
    def open(self, handle: bytes, device_id: int) -> int:
        if not 0 <= device_id < self.device_count:
            raise CudaError("invalid device ordinal")
        address = int.from_bytes(handle[:8].ljust(8, b"\0"), "little")
        if len(handle) != HANDLE_BYTES or address not in self.memory:
            raise CudaError("invalid argument")
        self.opened[address] = self.opened.get(address, 0) + 1
        return address

    def close(self, pointer: int, device_id: int) -> None:
        if not self.opened.get(pointer):
            raise CudaError("invalid argument")
        self.opened[pointer] -= 1
        self.closed.append(pointer)

    def allocation_size(self, pointer: int, device_id: int) -> int:
        base, offset = self._locate(pointer)
        return len(self.memory[base]) - offset

    def read(self, pointer: int, size: int, device_id: int) -> bytearray:
        base, offset = self._locate(pointer)
        if offset + size > len(self.memory[base]):
            raise CudaError("invalid argument")
        return bytearray(self.memory[base][offset : offset + size])

    def write(self, pointer: int, data: Any, device_id: int) -> None:
        base, offset = self._locate(pointer)
        source = np.frombuffer(data, dtype=np.uint8)
        if offset + source.size > len(self.memory[base]):
            raise CudaError("invalid argument")
        self.memory[base][offset : offset + source.size] = source.tobytes()

    def _locate(self, pointer: int) -> tuple[int, int]:
        base = _BASE + (pointer - _BASE) // _STRIDE * _STRIDE
        if not self.opened.get(base):
            raise CudaError("an illegal memory access was encountered")
        return base, pointer - base
