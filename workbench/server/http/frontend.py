"""The HTTP endpoint: ``HttpApp`` served on a bound socket by ``HttpConnection``s.

``serve()`` runs until ``request_exit()``; then the endpoint stops accepting, closes idle
connections at once and lets each busy one finish its reply (tritonserver's
``--exit-timeout-secs`` bounds the wait), then closes what is left.

While serving, each connection closes itself when its client leaves it idle or drips a request
head too slowly, and refuses a head that is too large (``limits.py``: the defaults and why).
"""

from __future__ import annotations

import asyncio
import socket
import time

from workbench.server.http.app import HttpApp
from workbench.server.http.connection import HttpConnection
from workbench.server.http.limits import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_HEADER_BYTES,
    HttpLimits,
)

#: how often the drain checks whether the busy connections have finished
_DRAIN_POLL_S = 0.01


class HttpFrontend:
    """Serves ``app`` on ``sock`` (already bound, so "port in use" surfaced at the caller)."""

    def __init__(
        self,
        app: HttpApp,
        sock: socket.socket,
        exit_timeout_s: float = 30.0,
        *,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
        max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    ) -> None:
        """``idle_timeout_s``: close a keep-alive connection with no request for this long;
        ``header_timeout_s``: close (408) a connection whose request head has not ended this
        long after it began; either 0 for no timeout. ``max_header_bytes``: refuse (431) a
        request line plus headers longer than this."""
        self.app = app
        self.sock = sock
        self.exit_timeout_s = exit_timeout_s
        self.limits = HttpLimits(idle_timeout_s, header_timeout_s, max_header_bytes)
        self.connections: set[HttpConnection] = set()
        #: every connection's serving task while it runs (awaited before ``serve`` returns)
        self.tasks: set[asyncio.Task[None]] = set()
        self._exit = asyncio.Event()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Accept connections from now on."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: HttpConnection(self.app, self.connections, self.tasks, self.limits),
            sock=self.sock,
            backlog=2048,
        )

    async def serve(self) -> None:
        """Serve until ``request_exit``, then drain (see the module docstring)."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._exit.wait()
        self._server.close()
        for connection in list(self.connections):
            connection.shutdown()
        deadline = time.monotonic() + self.exit_timeout_s
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(_DRAIN_POLL_S)
        for connection in list(self.connections):
            connection.abort()
        # What still serves now ends here: a request past the grace period, or a reply still
        # streaming to a client that is gone. Awaited so that no task outlives the loop.
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self._server.wait_closed()

    def request_exit(self) -> None:
        """Stop serving (on the loop's thread; use ``loop.call_soon_threadsafe`` elsewhere)."""
        self._exit.set()


__all__ = ["HttpFrontend"]
