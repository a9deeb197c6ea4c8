"""Shared memory between the server and a stub process: tensors cross here, not the socket.

Each stub has two regions, one per direction, so that each process only ever allocates in the
region it writes and no lock has to span processes. A region is an anonymous file (memfd on
Linux, an unlinked temporary file elsewhere) that both processes map; the writer grows it when
a message does not fit (readers remap when they see an offset past their mapping).

A message's tensors go into one *block*: an 8-byte header whose first word says "live" (1) or
"free" (0), then each tensor 64-byte aligned. The reader frees a block by zeroing that word
once nothing uses the data any more; the writer reclaims freed blocks when it next allocates.
So no message ever has to come back to say "done with it".

Numeric arrays under ``IN_PLACE_BYTES`` are copied into a block and copied out again (for
such sizes two plain copies cost less than tracking a view); bigger ones are copied into the
block once and read in place (see ``read_block``). BYTES tensors travel in Triton's form (each
element a little-endian ``uint32`` length then the bytes).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import struct
import tempfile
import threading
import weakref
from typing import Any

import numpy as np

from workbench._types import Tensor
from workbench.backends.python.pb_utils import deserialize_bytes_tensor, serialize_byte_tensor

_HEADER = 8
_ALIGN = 64
_LIVE = struct.Struct("<I")
INITIAL_SIZE = 1 << 20
#: tensors from this size up are read in place; smaller ones are copied out
IN_PLACE_BYTES = 64 * 1024

#: one tensor in a block: (name, datatype, shape, numpy dtype string, offset, nbytes)
TensorDesc = tuple[str, str, tuple[int, ...], str, int, int]


def _aligned(size: int) -> int:
    return (size + _ALIGN - 1) // _ALIGN * _ALIGN


def create_region_fd(size: int = INITIAL_SIZE) -> int:
    """A new anonymous shared-memory file of ``size`` bytes (the caller owns the fd)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("workbench-python-stub", 0)
    else:  # pragma: no cover - macOS: an unlinked file is just as private
        handle, path = tempfile.mkstemp(prefix="workbench-python-stub-")
        os.unlink(path)
        fd = handle
    os.ftruncate(fd, size)
    return fd


class Region:
    """One shared-memory file as this process maps it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.map = mmap.mmap(fd, self.size)
        #: block -> weak reference to the buffer its in-place arrays view
        self._leases: dict[int, weakref.ref[Any]] = {}

    def ensure(self, end: int) -> None:
        """Map at least ``end`` bytes (the writer grew the file since we mapped it)."""
        if end > self.size:
            # Arrays still viewing the old mapping keep it alive; both map the same file.
            size = os.fstat(self.fd).st_size
            self.map = mmap.mmap(self.fd, size)
            self.size = size  # after the map: whoever sees the new size sees the new map

    def grow(self, end: int) -> None:
        """Make the file at least ``end`` bytes long (doubling), then map it."""
        size = max(self.size * 2, _aligned(end))
        os.ftruncate(self.fd, size)
        self.map = mmap.mmap(self.fd, size)
        self.size = size

    def free(self, block: int) -> None:
        """Mark ``block`` free: its writer may reuse the space."""
        if block >= 0:
            _LIVE.pack_into(self.map, block, 0)

    def free_when_unused(self, block: int, lease: Any) -> None:
        """Free ``block`` once ``lease`` (the buffer arrays view it through) is collected."""
        self._leases[block] = weakref.ref(lease, functools.partial(self._release, block))

    def _release(self, block: int, _: Any) -> None:
        self._leases.pop(block, None)
        self.free(block)


class BlockWriter:
    """Allocates blocks in a region this process writes (thread-safe within the process)."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self._live: list[tuple[int, int]] = []  # (offset, size) sorted by offset
        self._lock = threading.Lock()

    def allocate(self, size: int) -> int:
        """The offset of a new live block with ``size`` bytes of payload."""
        total = (_HEADER + size + _ALIGN - 1) & -_ALIGN
        region = self.region
        with self._lock:
            mapping = region.map
            # Reclaim the blocks readers freed (the live word is 0 or 1, so its first byte
            # tells: cheaper than unpacking it), then take the first gap that fits.
            live = [block for block in self._live if mapping[block[0]]]
            if live:
                offset = _first_fit(live, total)
            else:  # the usual case: the reader freed every earlier block
                offset = 0
                live.append((0, total))
            self._live = live
            if offset + total > region.size:
                region.grow(offset + total)
            _LIVE.pack_into(region.map, offset, 1)
        return offset

    def write(self, tensors: list[Tensor]) -> tuple[int, list[TensorDesc]]:
        """Copy ``tensors`` into a new block; its offset (-1: none) and their descriptors."""
        if not tensors:
            return -1, []
        payloads = []
        total = 0
        for tensor in tensors:
            data = _payload(tensor)
            payloads.append(data)
            total += (len(data) + _ALIGN - 1) & -_ALIGN
        block = self.allocate(total)
        target = self.region.map
        offset = block + _HEADER
        descs: list[TensorDesc] = []
        for tensor, data in zip(tensors, payloads):  # noqa: B905 - same length by construction
            nbytes = len(data)
            target[offset : offset + nbytes] = data
            array = tensor.array
            dtype = "" if tensor.datatype == "BYTES" else _dtype_str(array.dtype)
            descs.append((tensor.name, tensor.datatype, array.shape, dtype, offset, nbytes))
            offset += (nbytes + _ALIGN - 1) & -_ALIGN
        return block, descs


def _first_fit(live: list[tuple[int, int]], total: int) -> int:
    """Put a block of ``total`` bytes into the first gap of ``live`` that fits; its offset."""
    end = 0
    for index, (start, length) in enumerate(live):
        if start - end >= total:
            live.insert(index, (end, total))
            return end
        end = start + length
    live.append((end, total))
    return end


def _payload(tensor: Tensor) -> memoryview | bytes:
    """The bytes of a tensor as they go into shared memory.

    Small numeric arrays go through ``tobytes`` (one C call, any layout); big ones through a
    memoryview, so that their data is copied once, straight into the block.
    """
    array = tensor.array
    if tensor.datatype != "BYTES":
        if array.nbytes < IN_PLACE_BYTES:
            return array.tobytes()
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return memoryview(array).cast("B")  # type: ignore[arg-type]
    data = serialize_byte_tensor(np.asarray(array))
    if data is None:  # not an object/bytes array: numbers in a BYTES tensor, as strings
        data = serialize_byte_tensor(np.asarray(array).astype(np.object_))
    return b"" if data == () else bytes(data)


def read_block(region: Region, block: int, descs: list[TensorDesc]) -> list[Tensor]:
    """The tensors of a block; the block is freed once nothing uses it any more.

    Tensors under ``IN_PLACE_BYTES`` are copied out (cheaper than tracking them). Bigger ones
    are read in place with ``numpy.frombuffer`` and keep their block live until the last array
    viewing it is gone: as in Triton, a model may keep its inputs, and the server its outputs,
    for as long as it likes.
    """
    if block < 0:
        return []
    last = descs[-1]  # a block's tensors lie in the order of their descriptors
    end = last[4] + last[5]
    if end > region.size:
        region.ensure(end)
    lease: list[Any] = []  # at most one buffer over the whole block
    tensors = [Tensor(desc[0], desc[1], _array(region, block, end, desc, lease)) for desc in descs]
    if lease:
        region.free_when_unused(block, lease[0])
    else:
        region.free(block)
    return tensors


def _array(region: Region, block: int, end: int, desc: TensorDesc, lease: list[Any]) -> Any:
    """One tensor's values: copied out when small, else viewing the block through ``lease``."""
    _, datatype, shape, dtype, offset, nbytes = desc
    if datatype == "BYTES":
        return deserialize_bytes_tensor(region.map[offset : offset + nbytes]).reshape(shape)
    if nbytes < IN_PLACE_BYTES:
        # A bytearray of the slice is the cheapest writable copy (frombuffer on the map, then
        # copy(), costs about three times as much for small tensors).
        return np.ndarray(shape, _dtype(dtype), bytearray(region.map[offset : offset + nbytes]))
    if not lease:  # the buffer lives as long as any array viewing it
        lease.append((ctypes.c_char * (end - block)).from_buffer(region.map, block))
    return np.ndarray(shape, _dtype(dtype), lease[0], offset - block)


@functools.cache
def _dtype(dtype: str) -> np.dtype[Any]:
    return np.dtype(dtype)


@functools.cache
def _dtype_str(dtype: np.dtype[Any]) -> str:
    """``dtype.str`` (which numpy formats anew on every access)."""
    return dtype.str
