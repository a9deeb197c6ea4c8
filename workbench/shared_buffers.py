"""Buffers another process can map: a large request body that a stub reads without a copy.

Issue #12 asks that one large request cost about one copy of its tensor. A Python model runs
in a stub process, so the server used to copy every large input from the request body into
the stub's shared memory: two copies of it until the stub was done. Now the HTTP front end
reads a body of ``SHARED_BYTES`` or more into a buffer made here (an anonymous memfd, mapped
shared), and the Python backend, finding an input inside such a buffer (``ref_of``), sends the
stub a reference instead of a copy: the server's pid, the file's descriptor number in the
server, its inode, and where the tensor starts. The stub opens the file through
``/proc/<pid>/fd/<fd>`` and maps it copy-on-write (``map_ref``): a model that writes into its
input changes its own pages, never the server's body (an ensemble may hand the same tensor to
another step).

Lifetimes need no messages: the server's descriptor closes when its mapping is collected
(the body, and every numpy view of it, are gone), and the kernel frees the
pages once no process maps the file any more. The reference stays valid while the server holds
the request it came in, which lasts until the stub has answered the request and so long after
the stub opened the file; the inode check turns a reused descriptor number into an error, never
into someone else's data. Where ``/proc`` or ``memfd_create`` is missing, or a child may not
open its parent's descriptors, ``available``/``can_map`` say so and the copy stays.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import threading
from typing import Any

import numpy as np

#: a body of this many bytes or more is read into a shareable buffer
SHARED_BYTES = 4 << 20

#: where a tensor lies in another process's buffer: (pid, descriptor, inode, byte offset)
Ref = tuple[int, int, int, int]

#: live buffers of this process: id -> (start address, end address, descriptor, inode)
_live: dict[int, tuple[int, int, int, int]] = {}
_PROBE = b"workbench-probe"
_probe_lock = threading.Lock()
#: the probe buffer (kept for the process's life) and its reference
_probe: tuple[memoryview, Ref] | None = None


@functools.cache
def available() -> bool:
    """Whether this process can make buffers that its children can map."""
    return hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd")


def allocate(size: int) -> memoryview:
    """A writable view of ``size`` fresh bytes that other processes can map (see ``ref_of``).

    The memory is not zeroed beyond what the kernel does for new pages; the buffer stays
    shareable until the last view of it is collected.
    """
    fd = os.memfd_create("workbench-body")
    try:
        os.ftruncate(fd, size)
    except OSError:
        os.close(fd)
        raise
    return adopt(fd, size)


def adopt(fd: int, size: int) -> memoryview:
    """A writable view of the ``size`` bytes of the memfd ``fd`` (made elsewhere: the native
    gRPC front end's), shareable as ``allocate``'s; the view owns ``fd`` from now on, and
    closes it where mapping fails."""
    try:
        mapping = _SharedMapping(fd, size)
    except (OSError, ValueError):
        os.close(fd)
        raise
    start = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
    mapping.key, mapping.fd = id(mapping), fd
    _live[mapping.key] = (start, start + size, fd, os.fstat(fd).st_ino)
    return memoryview(mapping)


class _SharedMapping(mmap.mmap):
    """A mapping that leaves the registry before it is unmapped: ``__del__`` runs before the
    mmap's own deallocation, which unmaps (with the GIL released) before any weak reference
    callback could run, so a new mapping at the same address could be taken for this one."""

    key = 0
    fd = -1

    def __del__(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                _live.pop(self.key, None)
                os.close(fd)
            except (AttributeError, OSError, TypeError):  # at exit the module may be gone
                pass


def any_live() -> bool:
    """Whether any buffer of this process is live (one dict check: the usual answer is no)."""
    return bool(_live)


def ref_of(array: Any) -> Ref | None:
    """Where ``array``'s data lies in a live buffer of this process, or None.

    Only a C-contiguous array wholly inside one buffer has a reference; the caller keeps it
    (or what it views) alive until the other process has mapped it.
    """
    if not array.flags.c_contiguous:
        return None
    address = array.__array_interface__["data"][0]
    end = address + array.nbytes
    for start, stop, fd, inode in list(_live.values()):
        if start <= address and end <= stop:
            return (os.getpid(), fd, inode, address - start)
    return None


def map_ref(ref: Ref) -> mmap.mmap:
    """Map the file ``ref`` names, copy-on-write (writes stay in this process).

    Raises ``OSError`` when the file cannot be opened or is no longer the one referred to.
    """
    pid, fd, inode, _ = ref
    handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY)
    try:
        if os.fstat(handle).st_ino != inode:
            raise OSError(f"descriptor {fd} of process {pid} is no longer the shared buffer")
        return mmap.mmap(handle, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(handle)  # the mapping keeps its own


def probe_ref() -> Ref | None:
    """A reference to a small buffer kept for this process's life, for a child to try
    (``can_map``); None where buffers cannot be shared."""
    global _probe
    if not available():
        return None
    with _probe_lock:
        if _probe is None:
            view = allocate(mmap.PAGESIZE)
            view[: len(_PROBE)] = _PROBE
            ref = ref_of(np.frombuffer(view, dtype=np.uint8))
            assert ref is not None
            # Kept out of the live buffers: ``any_live`` must stay the cheap "no" it usually is.
            del _live[id(view.obj)]
            _probe = (view, ref)
        return _probe[1]


def can_map(ref: Ref | None) -> bool:
    """Whether this process can map what ``ref`` (a ``probe_ref``) names and read it."""
    if ref is None:
        return False
    try:
        mapping = map_ref(ref)
    except (OSError, ValueError):
        return False
    with mapping:
        return mapping[: len(_PROBE)] == _PROBE


__all__ = [
    "SHARED_BYTES",
    "Ref",
    "adopt",
    "allocate",
    "any_live",
    "available",
    "can_map",
    "map_ref",
    "probe_ref",
    "ref_of",
]
