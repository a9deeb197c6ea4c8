"""Fixtures: a fake core and the HTTP app served by a real uvicorn on an ephemeral port."""

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
from workbench.server.http import create_app


@dataclass
class RunningServer:
    """A served app: its fake core and base URL (``http://127.0.0.1:<port>``)."""

    core: FakeCore
    url: str

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")


def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a background thread; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
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
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def fake_core() -> FakeCore:
    return FakeCore()


@pytest.fixture(scope="module")
def running() -> Iterator[RunningServer]:
    core = FakeCore()
    app = create_app(core, max_input_bytes=1 << 20)  # type: ignore[arg-type]
    for url in serve(app):
        yield RunningServer(core, url)
