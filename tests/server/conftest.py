"""Fixtures: a fake core and the HTTP app served by the real front end on an ephemeral port."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvicorn

from tests.server.fake_core import FakeCore
from workbench.server.http import HttpApp, create_app
from workbench.server.http.frontend import HttpFrontend


@dataclass
class RunningServer:
    """A served app: its fake core and base URL (``http://127.0.0.1:<port>``)."""

    core: FakeCore
    url: str

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")


def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` on the server's own HTTP front end in a background thread; yields the URL.

    An ``HttpApp`` is served by ``HttpFrontend`` (what ``Server`` runs); any other ASGI app
    (the metrics service) by uvicorn.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    if isinstance(app, HttpApp):
        yield from _serve_frontend(app, sock)
    else:
        yield from serve_with_uvicorn(app, sock)
    sock.close()


def _serve_frontend(app: HttpApp, sock: socket.socket) -> Iterator[str]:
    frontend = HttpFrontend(app, sock, exit_timeout_s=5)
    loop = asyncio.new_event_loop()
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
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        loop.call_soon_threadsafe(frontend.request_exit)
        thread.join(timeout=10)
        loop.close()


def serve_with_uvicorn(app: Any, sock: socket.socket) -> Iterator[str]:
    config = uvicorn.Config(
        app, lifespan="off", access_log=False, log_level="warning", http="httptools"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def fake_core() -> FakeCore:
    return FakeCore()


@pytest.fixture(scope="module")
def running() -> Iterator[RunningServer]:
    core = FakeCore()
    app = create_app(core, max_input_bytes=1 << 20)  # type: ignore[arg-type]
    for url in serve(app):
        yield RunningServer(core, url)
