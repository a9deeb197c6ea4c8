"""Reading a large request body in place (issue #17: no chunk copies, no join).

``HttpConnection`` lends its transport to a ``BodyReader`` (an ``asyncio.BufferedProtocol``)
once the head of a request with a large ``Content-Length`` is parsed: the kernel reads straight
into the body's one buffer, never past its end, and the connection takes the transport back
with the whole body. httptools never sees those bytes, so the next request is parsed by a fresh
parser from ``next_parser``, in the state the old one would be in.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import httptools
import numpy as np

from workbench import shared_buffers
from workbench.server.http.messages import Body

#: methods httptools knows by these names (any other is replayed as POST: only the state counts)
_VERBS = frozenset((b"GET", b"POST", b"PUT", b"DELETE", b"HEAD"))


class BodyOwner(Protocol):
    """The connection a ``BodyReader`` reads for (``HttpConnection``)."""

    def body_read(self, body: memoryview) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


class BodyReader(asyncio.BufferedProtocol):
    """The transport's protocol while the rest of a large body arrives: each read lands in
    the body's own buffer (from malloc, not zeroed first) at its place. A body of
    ``shared_buffers.SHARED_BYTES`` or more goes into a buffer a stub process can map, so that
    a Python model reads its inputs where they landed (issue #12: one copy of a request)."""

    def __init__(self, connection: BodyOwner, length: int, received: list[Body]) -> None:
        self.connection = connection
        self.buffer = _body_buffer(length)
        self.filled = 0
        for chunk in received:  # what came in the read that ended the head, and since
            self.buffer[self.filled : self.filled + len(chunk)] = chunk
            self.filled += len(chunk)

    def get_buffer(self, sizehint: int) -> memoryview:
        # No further than the body's end: what follows it is the connection's to parse.
        return self.buffer[self.filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self.filled += nbytes
        if self.filled == len(self.buffer):
            self.connection.body_read(self.buffer.toreadonly())

    def eof_received(self) -> bool | None:
        return self.connection.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.connection_lost(exc)

    # Replies to earlier pipelined requests may be going out while this body arrives: the
    # transport's flow control is the connection's.
    def pause_writing(self) -> None:
        self.connection.pause_writing()

    def resume_writing(self) -> None:
        self.connection.resume_writing()


def _body_buffer(length: int) -> memoryview:
    """A shareable buffer for a large body where one can be made (no descriptor left, say:
    then the body is copied to the stub as a smaller one is), else memory from malloc
    (``np.empty``: not zeroed; below 4 MiB from the heap's pages already in use, see
    ``server/heap.py``, where a fresh mapping per body faulted in and zeroed every page)."""
    if length >= shared_buffers.SHARED_BYTES and shared_buffers.available():
        try:
            return shared_buffers.allocate(length)
        except OSError:
            pass
    return np.empty(length, np.uint8).data


def next_parser(connection: Any, keep_alive: bool, method: bytes) -> Any:
    """A parser for what follows a body read in place, in the state the body's own parser
    would be in: ready for the next request, or (after a request that closes the connection)
    refusing any more bytes, which it learns from a request it is fed with no one listening."""
    if keep_alive:
        return httptools.HttpRequestParser(connection)
    parser = httptools.HttpRequestParser(_Deaf())
    verb = method if method in _VERBS else b"POST"
    parser.feed_data(verb + b" / HTTP/1.1\r\nconnection: close\r\n\r\n")
    return parser


class _Deaf:
    """Parser callbacks that hear nothing (see ``next_parser``)."""


__all__ = ["BodyReader", "next_parser"]
