"""The real HTTP front end on an ephemeral loopback port, with the limits a test chooses.

Like ``tests/server/conftest.py``'s ``serve`` but the ``HttpFrontend`` keywords are the
test's, and the loop is asyncio's or uvloop's (the server runs uvloop when it is installed:
its timers keep time in milliseconds, and the timeouts must work on both).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from workbench.server.http import HttpApp
from workbench.server.http.frontend import HttpFrontend

LOOPS = ["asyncio", "uvloop"]


@dataclass
class Served:
    """A running front end: where it listens and the loop it runs on."""

    host: str
    port: int
    loop: asyncio.AbstractEventLoop
    frontend: HttpFrontend

    def connect(self, timeout: float = 10.0) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=timeout)


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


@contextlib.contextmanager
def serve_frontend(app: HttpApp, loop_kind: str = "asyncio", **limits: Any) -> Iterator[Served]:
    """Serve ``app`` in a background thread until the block ends (``limits``: the
    ``HttpFrontend`` keywords)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    loop = new_loop(loop_kind)
    frontend = HttpFrontend(app, sock, exit_timeout_s=2, **limits)
    started = threading.Event()

    async def main() -> None:
        await frontend.start()
        started.set()
        await frontend.serve()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the HTTP front end did not start")
    try:
        yield Served("127.0.0.1", sock.getsockname()[1], loop, frontend)
    finally:
        loop.call_soon_threadsafe(frontend.request_exit)
        thread.join(timeout=15)
        loop.close()
        sock.close()


@dataclass
class Answer:
    """One HTTP reply off the wire."""

    status: int
    headers: dict[bytes, bytes]
    body: bytes


def read_answer(sock: socket.socket, buffer: bytes = b"") -> tuple[Answer, bytes]:
    """One ``content-length`` framed reply (what the front end sends but for streams), and
    the bytes after it. Raises ``AssertionError`` on a malformed or cut reply."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a whole head; got {buffer!r}"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    version, status, *_ = status_line.split(b" ", 2)
    assert version == b"HTTP/1.1" and status.isdigit() and len(status) == 3, status_line
    headers = {}
    for line in lines:
        name, sep, value = line.partition(b": ")
        assert sep and name, f"malformed header line {line!r}"
        headers[name.lower()] = value
    length = int(headers.get(b"content-length", b"0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        rest += chunk
    return Answer(int(status), headers, rest[:length]), rest[length:]


def closed_silently(sock: socket.socket) -> bool:
    """True when the server closes the connection without sending anything (first read is
    EOF); reads until then (the socket's timeout bounds the wait)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True
