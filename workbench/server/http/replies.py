"""Writing a reply on a connection: its head, and its body in one piece, in parts, or streamed.

A body under ``JOIN_BELOW`` bytes is joined to its head and written with one ``write`` (one
buffer costs the transport less). A larger one is handed to the transport beside its head,
and a reply's ``more`` buffers (a large binary output, left where the model wrote it) after
it, all unjoined: uvloop's ``writelines`` keeps references to them until they are sent, so
the connection makes no copy of a large output (issue #12). A streamed reply (generate) goes
out through ``StreamSender``, chunked unless it gives its length.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from typing import Any, Protocol

from workbench.memo import remember
from workbench.server.http.messages import Message, Reply
from workbench.server.http.tracing import http_sent

#: a reply body under this size is joined to its head and written in one piece
JOIN_BELOW = 64 * 1024


class ReplyWriter(Protocol):
    """Where a streamed reply's bytes go (``HttpConnection.write``)."""

    def write(self, data: bytes) -> None: ...

    async def drained(self) -> None:
        """Return once the client has read enough of what was written (flow control)."""


def status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode()


_STATUS_LINES = {status.value: status_line(status.value) for status in HTTPStatus}


def reply_head(
    status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool, length: int = -1
) -> bytearray:
    """Status line and headers of a reply, up to and including the blank line; a
    ``content-length`` first when ``length`` is given.

    Remembered by all it is made of: the replies to the same request are alike (a binary
    infer reply of the same outputs has the same headers and length), so most are copied
    from an earlier one (a ``bytearray``: the caller may add the body to it).
    """
    key = (status, length, keep_alive, *headers)
    try:
        head = _heads.get(key)
    except TypeError:  # an ASGI app's header pairs may be lists
        return bytearray(_head(status, headers, keep_alive, length))
    if head is None:
        head = remember(_heads, key, _head(status, headers, keep_alive, length))
    return bytearray(head)


def _head(status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool, length: int) -> bytes:
    head = bytearray(_STATUS_LINES.get(status) or status_line(status))
    if length >= 0:
        head += b"content-length: %d\r\n" % length
    for name, value in headers:
        head += name + b": " + value + b"\r\n"
    if not keep_alive:
        head += b"connection: close\r\n"
    head += b"\r\n"
    return bytes(head)


#: reply heads by status, length, keep-alive and headers (``memo.LIMIT`` at most)
_heads: dict[tuple[Any, ...], bytes] = {}


def write_reply(transport: Any, reply: Reply, keep_alive: bool, head_only: bool = False) -> None:
    """Write ``reply`` on ``transport``: head and body (a reply to HEAD: its head only, with
    the length of the body); a traced reply's send is stamped on its trace."""
    head = reply_head(reply.status, reply.headers, keep_alive, reply.length)
    trace = reply.trace
    started = 0 if trace is None else time.monotonic_ns()
    if head_only:
        transport.write(head)
    elif reply.more:  # a large binary output: its parts go out as they are
        transport.writelines((head, reply.body, *reply.more))
    elif len(reply.body) < JOIN_BELOW:
        head += reply.body
        transport.write(head)
    else:  # the transport sends both without joining them (one copy of the body less)
        transport.writelines((head, reply.body))
    if trace is not None:
        http_sent(trace, started)


class StreamSender:
    """ASGI ``send`` for one streamed reply: chunked unless a ``content-length`` is given."""

    def __init__(self, connection: ReplyWriter, keep_alive: bool) -> None:
        self.connection = connection
        self.keep_alive = keep_alive
        self.chunked = True

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._start(message["status"], list(message.get("headers", [])))
            return
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        if not self.chunked:
            self.connection.write(body)
        else:
            data = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            self.connection.write(data + (b"" if more else b"0\r\n\r\n"))
        if more:  # a stream's next part waits until the client has read enough of this one
            await self.connection.drained()

    def _start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.chunked = not any(name.lower() == b"content-length" for name, _ in headers)
        if self.chunked:
            headers.append((b"transfer-encoding", b"chunked"))
        self.connection.write(bytes(reply_head(status, headers, self.keep_alive)))


__all__ = ["JOIN_BELOW", "ReplyWriter", "StreamSender", "reply_head", "status_line", "write_reply"]
