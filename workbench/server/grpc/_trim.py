"""Give the C heap back to the system after a very large gRPC message.

grpc's core and protobuf allocate a large message's buffers with ``malloc``; glibc keeps the
freed space in its arenas, so after a 1 GiB request the server stayed hundreds of MiB above
where it was (``benchmarks/large_message_memory.py``). ``malloc_trim(0)`` returns it. It runs
once the reply has had time to leave (it is sent after the handler returns), on the loop.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable

#: messages from this size up are followed by a trim
TRIM_AFTER_BYTES = 64 << 20
_DELAY_S = 1.0


@functools.cache
def _malloc_trim() -> Callable[[int], object] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def trim_after_reply() -> None:
    """Schedule ``malloc_trim(0)`` shortly after this call's reply (glibc only; else nothing)."""
    trim = _malloc_trim()
    if trim is not None:
        asyncio.get_running_loop().call_later(_DELAY_S, trim, 0)
