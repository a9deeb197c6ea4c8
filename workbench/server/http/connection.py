"""One HTTP/1.1 connection, parsed with httptools and served straight from ``HttpApp``.

This replaces uvicorn on the serving port because the infer path is measured at
concurrency 1, where every microsecond per request shows: uvicorn builds an ASGI scope, a
request/response cycle object, a task and four ASGI messages per request, ~150 us of CPU
here. A connection instead collects the request (``on_url``/``on_header``/``on_body``), hands
an ``HttpRequest`` to ``HttpApp.handle`` and writes the reply's head and body in one
``write``. Requests pipelined on one connection are answered in order, one at a time.

Flow control both ways, so that a client bounds what it makes the server hold: reading stops
while ``_MAX_QUEUED`` requests, or bodies of ``_MAX_QUEUED_BYTES``, wait to be served (Triton
reads no further than the request it serves), and serving stops while the transport holds
more unsent reply bytes than its high-water mark (``pause_writing``), until the client has read
them (``resume_writing``). A client that pipelines requests and never reads their replies so
holds at most one reply beyond that mark and the queue, not every reply it asked for.

Replies are written by ``replies.py``; only streamed (generate) replies use the ASGI
``send``/``receive`` shape, through its ``StreamSender`` (chunked transfer encoding) and a
``receive`` here that reports the client leaving.

A connection that waits on its client (idle between requests, or a request head that does not
end) is closed after the timeouts of ``limits.HttpLimits``, and a head over its size limit is
refused. One timer per connection does this lazily: the hot path only moves ``deadline`` (one
clock read per reply), and the timer, when it fires early, re-arms itself at the new deadline.

A body of ``_READ_IN_PLACE_FROM`` bytes or more whose ``Content-Length`` is given and that does
not arrive in the read that ended its head is read straight into one buffer: the connection
lends its transport to a ``BodyReader`` (an ``asyncio.BufferedProtocol``) until the body is
in, so no chunk of it becomes a ``bytes`` object and nothing joins them (issue #17). httptools
never sees those bytes; the next request is parsed by a fresh parser. A chunked body, or one
refused for its size, takes the path of any other body.

While tracing is on, a connection notes when each request's bytes began to arrive and ended
(Triton's HTTP_RECV_START/END) and stamps a traced reply's send (``tracing.py``); while it is
off that costs one check per read.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import socket
import time
from collections import deque
from typing import TYPE_CHECKING
from urllib.parse import unquote

import httptools

from workbench.server.http.body_reader import BodyReader, next_parser
from workbench.server.http.limits import DEFAULT_LIMITS, HttpLimits
from workbench.server.http.messages import Body, HttpRequest, Message, Reply, error_reply
from workbench.server.http.replies import StreamSender, reply_head, write_reply

if TYPE_CHECKING:
    from workbench.server.http.app import HttpApp

log = logging.getLogger("workbench.server.http")

#: pipelined requests held per connection before it stops reading (flow control)
_MAX_QUEUED = 16
#: ... or requests whose bodies hold this many bytes together
_MAX_QUEUED_BYTES = 4 << 20
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_BAD_REQUEST = b'{"error":"Invalid HTTP request received."}'
_HEAD_TIMEOUT = b'{"error":"Request header timed out."}'
_HEAD_TOO_LARGE = b'{"error":"Request header fields too large."}'
#: a timer may fire this early (uvloop keeps time in milliseconds): close rather than re-arm
_TIMER_SLACK_S = 0.002
#: urls up to this long have their decoded path remembered (clients repeat the same few)
_CACHED_URL_BYTES = 512
#: the headers the connection itself acts on
_FRAMING_HEADERS = frozenset({b"content-length", b"expect"})
_METHODS = {m: m.decode("ascii") for m in (b"GET", b"POST", b"PUT", b"DELETE", b"HEAD")}
#: a body of at least this many bytes, with its length given, is read in place (``BodyReader``)
_READ_IN_PLACE_FROM = 64 * 1024


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head over the size limit."""


def request_path(url: bytes) -> str:
    """The decoded path of a request target (query and fragment dropped)."""
    if len(url) <= _CACHED_URL_BYTES:
        return _cached_path(url)
    return _parse_path(url)


def _parse_path(url: bytes) -> str:
    return unquote(httptools.parse_url(url).path.decode("latin-1"))


_cached_path = functools.lru_cache(maxsize=256)(_parse_path)


class HttpConnection(asyncio.Protocol):
    """Parses requests off one connection and writes their replies, in order."""

    def __init__(
        self,
        app: HttpApp,
        connections: set[HttpConnection],
        tasks: set[asyncio.Task[None]],
        limits: HttpLimits = DEFAULT_LIMITS,
    ) -> None:
        self.app = app
        self.connections = connections
        #: the front end's serving tasks: this connection's joins while it runs
        self.tasks = tasks
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        #: set when the server is stopping: close once the current reply is written
        self.closing = False
        self.queue: deque[tuple[HttpRequest, bool]] = deque()
        #: the bytes of the queued requests' bodies
        self.queued_bytes = 0
        self.busy = False
        self.paused = False
        #: the transport holds more unsent bytes than its high-water mark (``pause_writing``)
        self.writing_paused = False
        #: what the serving task waits on while ``writing_paused``
        self._drain: asyncio.Future[None] | None = None
        #: bytes of body so far (set by the first ``on_body`` of each request)
        self.size = 0
        #: the last ``Content-Length`` given (stale for a request without one: see
        #: ``_body_pending``)
        self.length = 0
        self._gone: asyncio.Future[None] | None = None
        #: the task serving this connection's requests, and what it waits on when idle
        self._serving: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._idle_s, self._head_s = limits.idle_s, limits.header_s
        self._max_head = limits.max_header_bytes
        #: loop time at which a connection waiting on its client is closed (see ``_expire``)
        self.deadline = math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        #: what to answer once the replies under way are out (a head too large, or bytes
        #: that are not HTTP, after pipelined requests): (status, JSON body)
        self.late_refusal: tuple[int, bytes] | None = None
        #: while tracing is on: when the bytes of the request being read began to arrive
        self.tracer = app.tracer
        self.recv_start_ns = 0
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        #: the body's first chunk; ``more`` holds the rest when it came in several (the whole
        #: body, read-only, when ``BodyReader`` read it)
        self.body: Body = b""
        self.more: list[Body] | None = None
        #: the error to answer instead of serving (a body over the size limit)
        self.refusal: Exception | None = None
        #: how many "100 Continue" to send once the headers are in
        self.continues = 0
        #: the parser is between messages or inside a head (not inside a body)
        self.in_head = True
        #: bytes read since this head began (an undercount by what came in the read that
        #: ended the previous message: enough to bound what a head can make us buffer)
        self.head_bytes = 0

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections.add(self)
        self._arm(self.loop.time() + self._head_s)  # the first request's head

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.connections.discard(self)
        self.queue.clear()
        self.queued_bytes = 0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._waiter is not None and not self._waiter.done():  # (cancelled at the exit)
            self._waiter.set_result(None)  # the serving task sees the connection closed
        self._waiter = None
        self.resume_writing()  # nothing more will be sent: whoever waits to send moves on
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self._drain is not None:
            if not self._drain.done():  # (cancelled at the exit)
                self._drain.set_result(None)
            self._drain = None

    async def drained(self) -> None:
        """Return once the client has read enough of what was written (at once unless
        ``pause_writing`` came): the serving task's wait before its next reply."""
        if self.writing_paused and not self.closed:
            if self._drain is None or self._drain.done():  # (one whose waiter was cancelled)
                self._drain = self.loop.create_future()
            await self._drain

    def data_received(self, data: bytes) -> None:
        if self.tracer.enabled and not self.recv_start_ns:  # HTTP_RECV_START, traced or not
            self.recv_start_ns = time.monotonic_ns()
        if self.in_head:
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # An upgrade we do not speak (``Upgrade: h2c`` from curl --http2): the request
            # itself is queued already and is served as HTTP/1.1; nothing after it is read.
            self._ignore_upgrade()
            return
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _HeadTooLarge):
                self._refuse_after_replies(431, _HEAD_TOO_LARGE)
            else:
                self._refuse_after_replies(400, _BAD_REQUEST)
            return
        if self.in_head:
            if self.head_bytes:  # a head that has not ended yet
                self._head_pending(len(data))
        elif self.refusal is None and self.length >= _READ_IN_PLACE_FROM:
            self._body_pending()

    def _head_pending(self, arrived: int) -> None:
        """Bound the head that is arriving: its size now, its time from its first bytes on."""
        if self.head_bytes > self._max_head:
            self._refuse_after_replies(431, _HEAD_TOO_LARGE)
        elif self.head_bytes == arrived and not self.busy:  # its first bytes
            self._arm(self.loop.time() + self._head_s)

    def _refuse_after_replies(self, status: int, body: bytes) -> None:
        """Refuse now, or once the requests before this one have their replies (reading stops
        until then, for good): a client that pipelined gets every answer, in order."""
        if not self.busy:
            self._refuse(status, body)
            return
        assert self.transport is not None
        self.late_refusal = (status, body)
        self.transport.pause_reading()
        self.paused = False  # so that serving the queue does not resume reading

    def _ignore_upgrade(self) -> None:
        if not self.busy:  # no whole request came before the upgrade (CONNECT)
            self._refuse(400, _BAD_REQUEST)
            return
        self.closing = True  # its reply says ``Connection: close`` and ends the connection
        assert self.transport is not None
        self.transport.pause_reading()
        self.paused = False  # so that serving the queue does not resume reading

    def _refuse(self, status: int, body: bytes) -> None:
        """Answer ``status`` with a JSON ``{"error": ...}`` and hang up, as uvicorn does for
        bytes that are not HTTP/1.x (the body left out when the request was a HEAD: a client
        would read it as the next reply). Bytes that stop before a request target (``HEAD``
        and nothing more, timed out) are no HEAD request yet: they get the body."""
        assert self.transport is not None
        head = reply_head(status, _content(body, b"application/json"), keep_alive=False)
        if not self.url or self.parser.get_method() != b"HEAD":
            head += body
        self.transport.write(bytes(head))
        self.transport.close()

    # -- timeouts ------------------------------------------------------------------------------
    def _arm(self, deadline: float) -> None:
        """Close at ``deadline`` unless the connection moves on; the timer is only replaced
        when it would fire too late."""
        self.deadline = deadline
        if deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_at(deadline, self._expire)
            self._timer_at = deadline

    def _expire(self) -> None:
        """The timer: close the connection if it still waits on its client past ``deadline``."""
        self._timer, self._timer_at = None, math.inf
        if self.busy or not self.in_head or self._stopped():
            return  # serving, or a body arriving: ``_rest`` arms again once the replies are out
        if self.deadline > self.loop.time() + _TIMER_SLACK_S:
            self._arm(self.deadline)  # it moved on since the timer was set
        elif self.head_bytes:
            self._refuse(408, _HEAD_TIMEOUT)  # a head that did not end in time
        else:
            self._close()  # idle: nothing was asked, so nothing is answered

    def _rest(self) -> None:
        """Every reply is out: from now on the connection waits on its client (unless a body
        is arriving, which has no timeout)."""
        if self._stopped():
            return
        if self.closing:  # the server stopped while a reply waited for its client to read
            self._close()
        elif self.late_refusal is not None:
            self._refuse(*self.late_refusal)
        elif self.in_head and self.head_bytes:
            self._arm(self.loop.time() + self._head_s)  # a head came in while we served
        elif self.in_head:
            self._arm(self.loop.time() + self._idle_s)

    # -- httptools callbacks -------------------------------------------------------------------
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self.headers.append((name, value))
        if name in _FRAMING_HEADERS:
            self._framing(name, value)

    def _framing(self, name: bytes, value: bytes) -> None:
        """Content-Length and Expect, in the order they came (a 100-continue is not sent for
        a body already known to be too large)."""
        if name == b"content-length":
            if value.isdigit():  # (httptools refuses a second one before we see it)
                self.length = size = int(value)
                if size > self.app.max_input_bytes:
                    self.refusal = self.app.refuse_length(size)
        elif value.lower() == b"100-continue" and not self.refusal:
            self.continues += 1

    def on_headers_complete(self) -> None:
        self.in_head = False
        # ``head_bytes`` is 0 for a head that began in the read that ended the message before
        # it, and counts any body that came in the same read: measure the head itself then.
        if not self.head_bytes or self.head_bytes > self._max_head:
            if self._head_size() > self._max_head:
                raise _HeadTooLarge
        if self.continues:
            assert self.transport is not None
            self.transport.write(_CONTINUE * self.continues)  # one per Expect header

    def _head_size(self) -> int:
        """The request target and header fields, as parsed (each line's framing counted)."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def on_body(self, body: bytes) -> None:
        if self.refusal is not None:
            return  # read and dropped: the reply is the size error
        if not self.body:
            self.body = body
            self.size = len(body)
        else:
            self.more = self.more or [self.body]
            self.more.append(body)
            self.size += len(body)
        if self.size > self.app.max_input_bytes:
            self.refusal = self.app.refuse_length(self.size)
            self.body, self.more = b"", None  # only the size error is answered

    # -- a large body, read in place --------------------------------------------------------
    def _body_pending(self) -> None:
        """A body of ``length`` bytes or more is arriving: read the rest of it in place (one
        whose head said chunked keeps a stale ``length`` and is left to httptools)."""
        if self.transport is None or self._stopped() or self._header(b"transfer-encoding"):
            return
        received = (self.more or [self.body]) if self.body else []
        self.transport.set_protocol(BodyReader(self, self.length, received))

    def _header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lower case) of the request being read, or ``None``."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def body_read(self, body: memoryview) -> None:
        """``BodyReader`` has the whole body: queue the request, and parse from here on with
        a fresh parser (the one that read the head still waits for the body)."""
        assert self.transport is not None
        self.transport.set_protocol(self)
        keep_alive, method = self.parser.should_keep_alive(), self.parser.get_method()
        self.body, self.more = body, None
        self.on_message_complete()
        self.parser = next_parser(self, keep_alive, method)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        body = self.body if self.more is None else b"".join(self.more)
        request = HttpRequest(
            _METHODS.get(method) or method.decode("ascii"),
            request_path(self.url),
            self.headers,
            body,
            self.refusal,
        )
        if self.recv_start_ns:  # tracing is on: HTTP_RECV_START and HTTP_RECV_END
            request.recv_start_ns, request.recv_end_ns = self.recv_start_ns, time.monotonic_ns()
            self.recv_start_ns = 0
        self._reset()  # for the next message (here rather than in on_message_begin: one call less)
        self.queue.append((request, self.parser.should_keep_alive()))
        self.queued_bytes += len(body)
        self.busy = True
        if self._waiter is not None:  # the serving task is idle: wake it
            self._waiter.set_result(None)
            self._waiter = None
        elif self._serving is None:
            self._serving = self.loop.create_task(self._serve_queue())
            self.tasks.add(self._serving)
            self._serving.add_done_callback(self.tasks.discard)
        elif (
            len(self.queue) >= _MAX_QUEUED or self.queued_bytes >= _MAX_QUEUED_BYTES
        ) and self.transport is not None:
            self.transport.pause_reading()
            self.paused = True

    # -- serving -------------------------------------------------------------------------------
    def _stopped(self) -> bool:
        return self.closed or (self.transport is not None and self.transport.is_closing())

    async def _serve_queue(self) -> None:
        """Serve queued requests one at a time (keeping replies in order), then wait for more.

        One task per connection, woken through a future, because a task per request costs
        more than the rest of the connection's work for a small request.
        """
        while True:
            if not self.queue and not self.closed:  # (closed: the queue was dropped)
                self.busy = False
                self._rest()
                self._waiter = self.loop.create_future()
                await self._waiter
            if self._stopped():
                break
            request, keep_alive = self.queue.popleft()
            self.queued_bytes -= len(request.body)
            if self.paused and self.transport is not None and self._queue_has_room():
                self.transport.resume_reading()
                self.paused = False
            try:
                reply = await self.app.handle(request)
                keep_alive = keep_alive and not self.closing
                if isinstance(reply, Reply):
                    self._write_reply(reply, keep_alive, request.method == "HEAD")
                else:
                    await reply.respond(StreamSender(self, keep_alive).send, self._receive)
            except Exception as exc:  # noqa: BLE001 - never leave a client without an answer
                self._write_reply(error_reply(exc), keep_alive=False)
                keep_alive = False
            if not keep_alive:
                self._close()
            elif self.writing_paused:  # the client is behind: no more replies until it reads
                await self.drained()
        self.busy = False

    def _queue_has_room(self) -> bool:
        """Room to read again: the queue is down to half of either bound."""
        return len(self.queue) < _MAX_QUEUED // 2 and self.queued_bytes < _MAX_QUEUED_BYTES // 2

    def _write_reply(self, reply: Reply, keep_alive: bool, head_only: bool = False) -> None:
        """Head and body (a reply to HEAD: its head only, with the length of the body)."""
        if self.closed or self.transport is None:
            return
        write_reply(self.transport, reply, keep_alive, head_only)

    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    async def _receive(self) -> Message:
        """ASGI ``receive`` after the body was read: returns once the client is gone."""
        if self._gone is None:
            self._gone = self.loop.create_future()
            if self.closed:
                self._gone.set_result(None)
        # Shielded: a reply that stops listening cancels its wait, not the connection's future
        # (the next streamed reply on this connection waits on the same one).
        await asyncio.shield(self._gone)
        return {"type": "http.disconnect"}

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def shutdown(self) -> None:
        """The server is stopping: close now when idle, else after the current reply."""
        self.closing = True
        if not self.busy:
            self._close()


def _content(body: bytes, content_type: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", content_type), (b"content-length", b"%d" % len(body))]


__all__ = ["HttpConnection", "request_path"]
