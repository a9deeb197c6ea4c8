"""Shared memory between the server and a stub process: tensors cross here, not the socket.

Each stub has two regions, one per direction, so that each process only ever allocates in the
region it writes and no lock has to span processes. A region is an anonymous file (memfd on
Linux, an unlinked temporary file elsewhere) that both processes map; the writer grows it when
a message does not fit (readers remap when they see an offset past their mapping).

A message's tensors go into one *block*: an 8-byte header whose first byte says "live" (1) or
"free" (0), then each tensor 64-byte aligned. The reader frees a block by zeroing that word
once nothing uses the data any more; the writer reclaims freed blocks when it next allocates.
So no message ever has to come back to say "done with it".

Numeric arrays under ``IN_PLACE_BYTES`` are copied into a block and copied out again (for
such sizes two plain copies cost less than tracking a view); bigger ones are copied into the
block once and read in place (see ``read_block``). BYTES tensors travel in Triton's form (each
element a little-endian ``uint32`` length then the bytes).

A message whose tensors come to ``INLINE_BYTES`` or less has no block: each descriptor carries
its tensor's bytes instead of an offset, and they cross in the message itself. For such sizes
allocating, placing, reading and freeing a block cost more than the few extra bytes on the
socket (a third of the loop's per-execution messaging for a 64-byte tensor).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import tempfile
import threading
import time
import weakref
from typing import Any

import numpy as np

from workbench import shared_buffers, threads
from workbench._types import Tensor
from workbench.backends.python.pb_utils import deserialize_bytes_tensor, serialize_byte_tensor
from workbench.config.dtypes import WIRE_TO_NUMPY

_HEADER = 8
_ALIGN = 64
INITIAL_SIZE = 1 << 20
#: tensors from this size up are read in place; smaller ones are copied out
IN_PLACE_BYTES = 64 * 1024
#: a message's tensors of this many bytes or fewer (together) travel in the message itself
INLINE_BYTES = 4096
#: free space this large gives its pages back to the system (see ``BlockWriter.release``)
RELEASE_BYTES = 4 << 20
#: how long after the last large message the free space's pages are given back: back-to-back
#: large requests reuse resident pages (a released page costs a fault and a zeroing on the
#: next write: giving 16 MiB back after every request made its round trip ~35% slower here);
#: ``WORKBENCH_SHM_RELEASE_AFTER_S`` sets it for the server and the stubs it starts
RELEASE_AFTER_S = float(os.environ.get("WORKBENCH_SHM_RELEASE_AFTER_S", "1.0"))
#: a freed block larger than this gives its pages back at once (as it is freed): for such
#: sizes memory matters more than the faults, and the peak stays at one copy per direction
RELEASE_AT_ONCE_BYTES = 64 << 20
_PAGE = mmap.PAGESIZE
_MADV_REMOVE = getattr(mmap, "MADV_REMOVE", None)  # Linux: frees a shared file's pages

#: one tensor in a block: (name, datatype, shape, numpy dtype string, offset, nbytes); the
#: offset of a tensor left in a shared buffer is that buffer's ``shared_buffers.Ref``, that of
#: a tensor carried in the message (``INLINE_BYTES``) its bytes
TensorDesc = tuple[str, str, tuple[int, ...], str, Any, int]
#: one tensor to write: (name, wire datatype, array)
Part = tuple[str, str, Any]

#: ``dtype.str`` of the wire types' dtypes (numpy formats it anew on every access)
_DTYPE_STRS = {dtype: dtype.str for dtype in WIRE_TO_NUMPY.values()}
#: and back (a dict lookup costs less than ``np.dtype(text)``)
_DTYPES = {text: dtype for dtype, text in _DTYPE_STRS.items()}


def _aligned(size: int) -> int:
    return (size + _ALIGN - 1) // _ALIGN * _ALIGN


def create_region_fd(size: int = INITIAL_SIZE, name: str = "workbench-python-stub") -> int:
    """A new anonymous shared-memory file of ``size`` bytes (the caller owns the fd); ``name``
    is what ``/proc/<pid>/fd`` shows for it (``/memfd:<name>``)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(name, 0)
    else:  # pragma: no cover - macOS: an unlinked file is just as private
        handle, path = tempfile.mkstemp(prefix=f"{name}-")
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
        #: a view of ``map``: slicing it copies nothing (slicing ``map`` makes ``bytes``)
        self.view = memoryview(self.map)
        #: block -> weak reference to the buffer its in-place arrays view
        self._leases: dict[int, weakref.ref[Any]] = {}

    def ensure(self, end: int) -> None:
        """Map at least ``end`` bytes (the writer grew the file since we mapped it)."""
        if end > self.size:
            # Arrays still viewing the old mapping keep it alive; both map the same file.
            size = os.fstat(self.fd).st_size
            self.map = mmap.mmap(self.fd, size)
            self.view = memoryview(self.map)
            self.size = size  # after the map: whoever sees the new size sees the new map

    def grow(self, end: int) -> None:
        """Make the file at least ``end`` bytes long (doubling), then map it."""
        size = max(self.size * 2, _aligned(end))
        os.ftruncate(self.fd, size)
        self.map = mmap.mmap(self.fd, size)
        self.view = memoryview(self.map)
        self.size = size

    def free(self, block: int, end: int = 0) -> None:
        """Mark ``block`` free: its writer may reuse the space (and gives its pages back later).

        A block over ``RELEASE_AT_ONCE_BYTES`` (``end``: where its data ends) gives its pages
        back first, while the writer cannot reuse the space yet; the file keeps its size.
        """
        if block < 0:
            return
        if end - block > RELEASE_AT_ONCE_BYTES:
            _punch(self, block + _HEADER, end)
        self.map[block] = 0

    def free_when_unused(self, block: int, lease: Any, end: int = 0) -> None:
        """Free ``block`` once ``lease`` (the buffer arrays view it through) is collected."""
        self._leases[block] = weakref.ref(lease, functools.partial(self._release, block, end))

    def _release(self, block: int, end: int, _: Any) -> None:
        self._leases.pop(block, None)
        self.free(block, end)


class BlockWriter:
    """Allocates blocks in a region this process writes (thread-safe within the process)."""

    def __init__(self, region: Region, release_after_s: float | None = None) -> None:
        self.region = region
        self.release_after_s = RELEASE_AFTER_S if release_after_s is None else release_after_s
        self._live: list[tuple[int, int]] = []  # (offset, size) sorted by offset
        self._lock = threading.Lock()

    def allocate(self, size: int) -> int:
        """The offset of a new live block with ``size`` bytes of payload."""
        total = (_HEADER + size + _ALIGN - 1) & -_ALIGN
        region = self.region
        lock = self._lock
        lock.acquire()  # rather than ``with``: a third of the cost
        try:
            mapping = region.map
            # Reclaim the blocks readers freed, then take the first gap that fits.
            live = self._live
            if len(live) == 1 and not mapping[live[0][0]]:  # the usual case, without a loop
                live = []
            elif live:
                live = [block for block in live if mapping[block[0]]]
            if live:
                offset = _first_fit(live, total)
            else:  # the usual case: the reader freed every earlier block
                offset = 0
                live.append((0, total))
            self._live = live
            if offset + total > region.size:
                region.grow(offset + total)
            region.map[offset] = 1
        finally:
            lock.release()
        if total >= RELEASE_BYTES:
            _RELEASER.schedule(self, self.release_after_s)
        return offset

    def release(self) -> bool:
        """Give back the pages of every free stretch of ``RELEASE_BYTES`` or more.

        A region grows to the largest message it carried and never shrinks, so without this one
        1 GiB tensor would keep 1 GiB resident in both processes. Only the writer may do it,
        under its lock: no block is being placed, and a reader touches live blocks only. True
        while a large block is still live (its reader has not freed it yet): call again later.
        """
        with self._lock:
            mapping = self.region.map
            self._live = live = [block for block in self._live if mapping[block[0]]]
            end = 0
            for start, length in [*live, (self.region.size, 0)]:
                _punch(self.region, end, start)
                end = start + length
            return any(length >= RELEASE_BYTES for _, length in live)

    def write(self, tensors: list[Tensor], share: bool = False) -> tuple[int, list[TensorDesc]]:
        """Copy ``tensors`` into a new block; its offset (-1: none) and their descriptors.

        ``share``: a large tensor inside a buffer of ``shared_buffers`` (a request body) is
        referred to, not copied; the caller keeps it alive until the reader has mapped it.
        """
        parts = [(tensor.name, tensor.datatype, tensor.array) for tensor in tensors]
        if share and shared_buffers.any_live():
            return self._write_sharing(parts)
        return self.write_parts(parts)

    def write_parts(self, parts: list[Part]) -> tuple[int, list[TensorDesc]]:
        """``write`` for (name, datatype, array) triples: the stub has no ``Tensor`` objects."""
        if len(parts) == 1:  # the usual case, in one pass
            name, datatype, array = parts[0]
            data = _payload(datatype, array)
            if len(data) <= INLINE_BYTES:
                return -1, [_inline(name, datatype, array, data)]
            block = self.allocate(len(data))
            return block, [self._place(block + _HEADER, name, datatype, array, data)]
        if not parts:
            return -1, []
        payloads = [_payload(datatype, array) for _, datatype, array in parts]
        if sum(len(data) for data in payloads) <= INLINE_BYTES:
            return -1, [
                _inline(name, datatype, array, data)
                for (name, datatype, array), data in zip(parts, payloads)  # noqa: B905
            ]
        block = self.allocate(sum((len(data) + _ALIGN - 1) & -_ALIGN for data in payloads))
        offset = block + _HEADER
        descs: list[TensorDesc] = []
        for (name, datatype, array), data in zip(parts, payloads):  # noqa: B905 - same length
            descs.append(self._place(offset, name, datatype, array, data))
            offset += (len(data) + _ALIGN - 1) & -_ALIGN
        return block, descs

    def _write_sharing(self, parts: list[Part]) -> tuple[int, list[TensorDesc]]:
        """``write_parts``, with the tensors that lie in shared buffers referred to in place:
        their descriptor's offset is a ``shared_buffers.Ref`` and the block holds the rest."""
        refs = [_shared_ref(datatype, array) for _, datatype, array in parts]
        copied = [part for part, ref in zip(parts, refs, strict=True) if ref is None]
        block, copied_descs = self.write_parts(copied) if copied else (-1, [])
        placed = iter(copied_descs)
        descs: list[TensorDesc] = []
        for (name, datatype, array), ref in zip(parts, refs, strict=True):
            if ref is None:
                descs.append(next(placed))
            else:
                descs.append(
                    (name, datatype, array.shape, _dtype_str(datatype, array), ref, array.nbytes)
                )
        return block, descs

    def _place(
        self, offset: int, name: str, datatype: str, array: Any, data: bytes | memoryview
    ) -> TensorDesc:
        """Copy ``data`` to ``offset``; the descriptor of the tensor it holds."""
        nbytes = len(data)
        self.region.map[offset : offset + nbytes] = data
        return name, datatype, array.shape, _dtype_str(datatype, array), offset, nbytes


def _inline(name: str, datatype: str, array: Any, data: bytes | memoryview) -> TensorDesc:
    """The descriptor of a tensor that travels in the message: its bytes as its offset."""
    return name, datatype, array.shape, _dtype_str(datatype, array), bytes(data), len(data)


def _dtype_str(datatype: str, array: Any) -> str:
    """A descriptor's numpy dtype string ("" for BYTES, whose elements carry their lengths)."""
    return "" if datatype == "BYTES" else _DTYPE_STRS.get(array.dtype) or array.dtype.str


def _shared_ref(datatype: str, array: Any) -> shared_buffers.Ref | None:
    """Where a large numeric tensor lies in a shared buffer of this process, or None."""
    if datatype == "BYTES" or array.nbytes < IN_PLACE_BYTES:
        return None
    return shared_buffers.ref_of(array)


def _punch(region: Region, start: int, end: int) -> None:
    """Free the memory of the whole pages in ``[start, end)`` when there are enough of them."""
    first = -(-start // _PAGE) * _PAGE
    length = (end - first) // _PAGE * _PAGE
    if _MADV_REMOVE is not None and length >= RELEASE_BYTES:
        region.map.madvise(_MADV_REMOVE, first, length)


class _Releaser:
    """The one thread of this module: runs ``BlockWriter.release`` when a writer's time comes.

    A timer per writer would start a thread per large message; this one waits on the
    earliest deadline. Writers are held weakly: a closed instance's writer just goes away.
    """

    def __init__(self) -> None:
        self._due: dict[int, tuple[float, weakref.ref[BlockWriter]]] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, writer: BlockWriter, delay_s: float) -> None:
        """Release ``writer``'s free pages ``delay_s`` from now (a later call pushes it back)."""
        with self._wake:
            self._due[id(writer)] = (time.monotonic() + delay_s, weakref.ref(writer))
            if self._thread is None:
                self._thread = threads.start("workbench-shm-release", self._run)
            self._wake.notify()

    def _run(self) -> None:
        while True:
            for writer in self._next_due():
                if writer.release():  # a large block is still live: look again later
                    self.schedule(writer, writer.release_after_s)

    def _next_due(self) -> list[BlockWriter]:
        with self._wake:
            while True:
                now = time.monotonic()
                due = [key for key, (when, _) in self._due.items() if when <= now]
                if due:
                    refs = [self._due.pop(key)[1] for key in due]
                    return [w for w in (ref() for ref in refs) if w is not None]
                deadline = min((when for when, _ in self._due.values()), default=None)
                self._wake.wait(None if deadline is None else deadline - now)


_RELEASER = _Releaser()


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


def _payload(datatype: str, array: Any) -> memoryview | bytes:
    """The bytes of a tensor as they go into shared memory.

    Small numeric arrays go through ``tobytes`` (one C call, any layout); big ones through a
    memoryview, so that their data is copied once, straight into the block.
    """
    if datatype != "BYTES":
        if array.nbytes < IN_PLACE_BYTES:
            return array.tobytes()
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return memoryview(array).cast("B")
    data = serialize_byte_tensor(np.asarray(array))
    if data is None:  # not an object/bytes array: numbers in a BYTES tensor, as strings
        data = serialize_byte_tensor(np.asarray(array).astype(np.object_))
    return b"" if data == () else bytes(data)


def read_block(region: Region, block: int, descs: list[TensorDesc]) -> list[Tensor]:
    """The tensors of a block (see ``read_arrays``)."""
    arrays = read_arrays(region, block, descs)
    return [Tensor(desc[0], desc[1], array) for desc, array in zip(descs, arrays)]  # noqa: B905


def read_arrays(region: Region, block: int, descs: list[TensorDesc]) -> list[Any]:
    """The arrays of a block's tensors (of the message's own, with no block: ``block`` -1);
    the block is freed once nothing uses it any more.

    Tensors under ``IN_PLACE_BYTES`` are copied out (cheaper than tracking them). Bigger ones
    are read in place with ``numpy.frombuffer`` and keep their block live until the last array
    viewing it is gone: as in Triton, a model may keep its inputs, and the server its outputs,
    for as long as it likes. A tensor left in a shared buffer (its offset a
    ``shared_buffers.Ref``) is read from a copy-on-write mapping of that buffer.
    """
    if descs and any(desc[4].__class__ is tuple for desc in descs):
        return _read_with_refs(region, block, descs)
    if block < 0:  # no block: the tensors (if any) came in the message
        return [_from_message(desc) for desc in descs]
    last = descs[-1]  # a block's tensors lie in the order of their descriptors
    end = last[4] + last[5]
    if end > region.size:
        region.ensure(end)
    view = region.view
    arrays = []
    lease: Any = None  # at most one buffer over the whole block
    for _, datatype, shape, dtype, offset, nbytes in descs:
        if datatype == "BYTES":
            arrays.append(deserialize_bytes_tensor(view[offset : offset + nbytes]).reshape(shape))
            continue
        numpy_dtype = _DTYPES.get(dtype) or np.dtype(dtype)
        if nbytes < IN_PLACE_BYTES:
            # A bytearray of a slice of the view is the cheapest writable copy (slicing the
            # map would copy twice, and frombuffer then copy() costs twice as much).
            data = bytearray(view[offset : offset + nbytes])
            arrays.append(np.ndarray(shape, numpy_dtype, data))
            continue
        if lease is None:  # the buffer lives as long as any array viewing it
            lease = (ctypes.c_char * (end - block)).from_buffer(region.map, block)
        arrays.append(np.ndarray(shape, numpy_dtype, lease, offset - block))
    if lease is None:
        region.map[block] = 0  # free: every array is a copy
    else:
        region.free_when_unused(block, lease, end)
    return arrays


def _from_message(desc: TensorDesc) -> Any:
    """The array of a tensor carried in the message (a writable copy, as from a block)."""
    _, datatype, shape, dtype, data, _ = desc
    if datatype == "BYTES":
        return deserialize_bytes_tensor(data).reshape(shape)
    return np.ndarray(shape, _DTYPES.get(dtype) or np.dtype(dtype), bytearray(data))


def _read_with_refs(region: Region, block: int, descs: list[TensorDesc]) -> list[Any]:
    """``read_arrays`` for a message with tensors left in shared buffers: those are mapped
    (once per buffer; the arrays keep the mapping), the rest read from the block."""
    in_block = [desc for desc in descs if desc[4].__class__ is not tuple]
    from_block = iter(read_arrays(region, block, in_block) if in_block else [])
    mappings: dict[tuple[int, int, int], Any] = {}
    arrays = []
    for _, _, shape, dtype, offset, _ in descs:
        if offset.__class__ is not tuple:
            arrays.append(next(from_block))
            continue
        key = offset[:3]
        mapping = mappings.get(key)
        if mapping is None:
            mapping = mappings[key] = shared_buffers.map_ref(offset)
        arrays.append(np.ndarray(shape, _DTYPES.get(dtype) or np.dtype(dtype), mapping, offset[3]))
    return arrays
