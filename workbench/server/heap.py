"""The server process's C heap (glibc's malloc): tuned for tensors at start, trimmed after a
very large gRPC message.

Tuning. By default glibc serves an allocation of 128 KiB or more (a threshold it raises to the
size of the last such block freed) with a fresh ``mmap``, and gives the top of a heap back to
the system once more than twice that threshold is free. A tensor of about 1 MiB (grpc's and
protobuf's buffers, a reply's bytes) therefore cost, with several requests in flight, a fresh
mapping whose every page faulted in zeroed, then an unmap or a trim, per request: perf put
page faults and zeroing at a fifth of the server's CPU on 1 MiB gRPC echoes at concurrency 4.
``tune`` fixes both thresholds, as ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_``
would: blocks under ``MMAP_THRESHOLD`` come from the heap, which keeps up to
``TRIM_THRESHOLD`` free at its top. Measured with perf_analyzer, the server tuned and untuned
in turns, three times each (2026-11-26, `benchmarks/README.md`, large tensors): gRPC 1 MiB at
c=4 317-346 infer/s untuned, 452-544 tuned; HTTP within this machine's noise (604-820 both
ways). Bodies of ``shared_buffers.SHARED_BYTES`` (4 MiB) or more go to memfds, not to malloc.
Memory settled 2 s after 4 MiB, 16 MiB and 1 GiB requests was within 2 MiB of the untuned
server's (one run each, HTTP and gRPC); a trim threshold of 64 MiB kept 16 MiB after each
16 MiB gRPC request.

Trimming. grpc's core and protobuf allocate a very large message's buffers with ``malloc``;
glibc keeps the freed space in its arenas, so after a 1 GiB request the server stayed hundreds
of MiB above where it was (``benchmarks/large_message_memory.py``). ``malloc_trim(0)`` returns
it. It runs once the reply has had time to leave (it is sent after the handler returns), on
the loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import logging
from typing import Any

log = logging.getLogger(__name__)

#: gRPC messages from this size up are followed by a trim
TRIM_AFTER_BYTES = 64 << 20
_DELAY_S = 1.0
#: allocations smaller than this come from the heap rather than a fresh mapping each
MMAP_THRESHOLD = 4 << 20
#: free space at a heap's top kept mapped, up to this
TRIM_THRESHOLD = 16 << 20
# mallopt's parameters, from glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def _malloc_trim() -> Any | None:
    return getattr(_libc(), "malloc_trim", None)


@functools.cache
def tune() -> bool:
    """Set glibc's mmap and trim thresholds for tensors, once per process; whether it did
    (False: not glibc, or refused)."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    done = bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and done
    if not done:
        log.info("malloc's thresholds were not set; tensors of about 1 MiB will cost more CPU")
    return done


def trim_after_reply() -> None:
    """Schedule ``malloc_trim(0)`` shortly after this call's reply (glibc only; else nothing)."""
    trim = _malloc_trim()
    if trim is not None:
        asyncio.get_running_loop().call_later(_DELAY_S, trim, 0)
