"""Idle and slow clients cannot pin the HTTP front end's connections; oversized heads are refused.

Raw sockets against the real front end over the fake core, with timeouts of a fraction of a
second. Closes are asserted by reading EOF within a generous socket timeout, never by how
fast they came; waits longer than a timeout show what it must not cut.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.security.served_frontend import (
    LOOPS,
    Served,
    closed_silently,
    read_answer,
    serve_frontend,
)
from tests.server.fake_core import FakeCore
from workbench.core.request import InferRequest, InferResponse
from workbench.server.http import create_app
from workbench.server.http.limits import HttpLimits

SHORT_S = 0.3
#: how long a test waits where a timeout of ``SHORT_S`` must not have cut anything
WELL_PAST_S = 1.0
INFER_BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}
).encode()
HEALTH = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"


def post(path: str, body: bytes) -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (path.encode(), len(body))
    return head + body


class HeldCore(FakeCore):
    """Infer waits until the test releases it, so that an execution outlasts the timeouts."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.release: asyncio.Event | None = None

    async def infer(self, request: InferRequest) -> InferResponse:
        self.release = asyncio.Event()
        self.started.set()
        await self.release.wait()
        return await super().infer(request)


@pytest.fixture(params=LOOPS)
def loop_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def short(loop_kind: str) -> Iterator[Served]:
    """Both timeouts ``SHORT_S``."""
    app = create_app(FakeCore())  # type: ignore[arg-type]
    with serve_frontend(app, loop_kind, idle_timeout_s=SHORT_S, header_timeout_s=SHORT_S) as served:
        yield served


def served_health(served: Served) -> bool:
    with served.connect() as sock:
        sock.sendall(HEALTH)
        return read_answer(sock)[0].status == 200


# -- idle --------------------------------------------------------------------------------------
def test_an_idle_keep_alive_connection_is_closed_without_a_word(short: Served) -> None:
    with short.connect() as sock:
        sock.sendall(HEALTH)
        answer, rest = read_answer(sock)
        assert answer.status == 200 and b"connection" not in answer.headers
        assert rest == b""
        assert closed_silently(sock)


def test_a_connection_that_never_sends_is_closed_without_a_word(short: Served) -> None:
    with short.connect() as sock:
        assert closed_silently(sock)


def test_a_keep_alive_connection_used_within_the_timeout_stays_open(loop_kind: str) -> None:
    app = create_app(FakeCore())  # type: ignore[arg-type]
    with serve_frontend(app, loop_kind, idle_timeout_s=1.0) as served, served.connect() as sock:
        for _ in range(5):  # 1.5 s in all: past the timeout, which each request puts off
            time.sleep(0.3)
            sock.sendall(post("/v2/models/add_one/infer", INFER_BODY))
            assert read_answer(sock)[0].status == 200


def test_two_hundred_idle_connections_are_all_closed_and_the_server_serves_on(
    short: Served,
) -> None:
    # Half of them make a request as they connect: sent after all 200 connects, the first
    # ones' requests came after their SHORT_S head timeout on a stalled machine (CI, once).
    sockets = []
    try:
        for index in range(200):
            sockets.append(short.connect())
            if index % 2 == 0:
                sockets[-1].sendall(HEALTH)
        for index, sock in enumerate(sockets):
            if index % 2 == 0:
                assert read_answer(sock)[0].status == 200
            assert closed_silently(sock), f"connection {index} is still open"
    finally:
        for sock in sockets:
            sock.close()
    assert served_health(short)


def test_a_timeout_of_zero_never_closes(loop_kind: str) -> None:
    app = create_app(FakeCore())  # type: ignore[arg-type]
    with serve_frontend(app, loop_kind, idle_timeout_s=0, header_timeout_s=0) as served:
        with served.connect(timeout=WELL_PAST_S) as sock:
            with pytest.raises(TimeoutError):
                sock.recv(1)
            sock.sendall(HEALTH)
            assert read_answer(sock)[0].status == 200


# -- slow heads --------------------------------------------------------------------------------
def drip(sock: socket.socket, data: bytes, every_s: float = 0.05) -> None:
    """Send ``data`` a byte at a time until the server answers or the data runs out."""
    for byte in data:
        readable, _, _ = select.select([sock], [], [], every_s)
        if readable:
            return
        sock.sendall(bytes([byte]))


def test_a_head_dripped_byte_by_byte_gets_408_and_a_closed_connection(loop_kind: str) -> None:
    app = create_app(FakeCore())  # type: ignore[arg-type]
    slow = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 400
    with serve_frontend(app, loop_kind, idle_timeout_s=60, header_timeout_s=SHORT_S) as served:
        with served.connect() as sock:
            drip(sock, slow)
            answer, rest = read_answer(sock)
            assert closed_silently(sock)
        assert served_health(served)
    assert answer.status == 408
    assert answer.headers[b"connection"] == b"close"
    assert json.loads(answer.body)["error"]
    assert rest == b""


def test_a_head_begun_after_a_reply_is_timed_from_its_first_byte(short: Served) -> None:
    with short.connect() as sock:
        sock.sendall(HEALTH)
        assert read_answer(sock)[0].status == 200
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHo")
        answer, _ = read_answer(sock)
        assert closed_silently(sock)
    assert answer.status == 408


# -- what the timeouts must not cut ------------------------------------------------------------
def test_a_long_running_request_is_not_cut_by_the_timeouts(loop_kind: str) -> None:
    core = HeldCore()
    app = create_app(core)  # type: ignore[arg-type]
    with serve_frontend(app, loop_kind, idle_timeout_s=SHORT_S, header_timeout_s=SHORT_S) as served:
        with served.connect() as sock:
            sock.sendall(post("/v2/models/add_one/infer", INFER_BODY))
            assert core.started.wait(10)
            time.sleep(WELL_PAST_S)
            assert core.release is not None
            served.loop.call_soon_threadsafe(core.release.set)
            answer, _ = read_answer(sock)
    assert answer.status == 200
    assert json.loads(answer.body)["outputs"][0]["data"] == [1.0] * 16


def test_a_streamed_reply_is_not_cut_by_the_timeouts(short: Served) -> None:
    body = b'{"COUNT": 3, "parameters": {"hang": true}}'
    with short.connect() as sock:
        sock.sendall(post("/v2/models/repeat/generate_stream", body))
        received = b""
        while b"\n\n" not in received:  # the first event
            chunk = sock.recv(65536)
            assert chunk, "the stream was cut"
            received += chunk
        sock.settimeout(WELL_PAST_S)
        with pytest.raises(TimeoutError):  # still open, and the stream waits on its model
            sock.recv(65536)
    assert b'data: {"OUT":0' in received


def test_a_body_arriving_slowly_is_not_cut_by_the_timeouts(short: Served) -> None:
    request = post("/v2/models/add_one/infer", INFER_BODY)
    split = request.index(b"\r\n\r\n") + 10
    with short.connect() as sock:
        sock.sendall(request[:split])
        time.sleep(WELL_PAST_S)
        sock.sendall(request[split:])
        assert read_answer(sock)[0].status == 200


# -- head size ---------------------------------------------------------------------------------
LIMIT = 4096


@pytest.fixture
def limited() -> Iterator[Served]:
    with serve_frontend(create_app(FakeCore()), max_header_bytes=LIMIT) as served:  # type: ignore[arg-type]
        yield served


def with_header(size: int, end: bool = True) -> bytes:
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size
    return head + (b"\r\n\r\n" if end else b"")


@pytest.mark.parametrize(
    "request_bytes",
    [with_header(2 * LIMIT), with_header(64 * LIMIT, end=False), HEALTH + with_header(2 * LIMIT)],
    ids=["whole", "never-ending", "pipelined"],
)
def test_a_head_over_the_limit_gets_431_and_the_server_serves_on(
    limited: Served, request_bytes: bytes
) -> None:
    answers = []
    with limited.connect() as sock:
        try:
            sock.sendall(request_bytes)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before it was all sent: the reply is still there to read
        rest = b""
        for _ in range(request_bytes.count(b"GET ")):
            answer, rest = read_answer(sock, rest)
            answers.append(answer)
    assert [a.status for a in answers][-1] == 431
    assert all(a.status == 200 for a in answers[:-1])
    assert answers[-1].headers[b"connection"] == b"close"
    assert json.loads(answers[-1].body)["error"]
    assert served_health(limited)


def test_a_head_over_the_limit_behind_a_running_request_is_refused_after_its_reply() -> None:
    core = HeldCore()
    app = create_app(core)  # type: ignore[arg-type]
    with serve_frontend(app, max_header_bytes=LIMIT) as served, served.connect() as sock:
        sock.sendall(post("/v2/models/add_one/infer", INFER_BODY))
        assert core.started.wait(10)
        sock.sendall(with_header(2 * LIMIT, end=False))
        time.sleep(0.2)  # read and refused while the infer runs (a wait: nothing to observe)
        assert core.release is not None
        served.loop.call_soon_threadsafe(core.release.set)
        first, rest = read_answer(sock)
        second, rest = read_answer(sock, rest)
        assert closed_silently(sock) and rest == b""
    assert (first.status, second.status) == (200, 431)


def test_a_head_under_the_limit_is_served(limited: Served) -> None:
    with limited.connect() as sock:
        sock.sendall(with_header(LIMIT // 2))
        assert read_answer(sock)[0].status == 200


def test_limits_refuse_negative_timeouts_and_sizes() -> None:
    with pytest.raises(ValueError):
        HttpLimits(idle_timeout_s=-1)
    with pytest.raises(ValueError):
        HttpLimits(max_header_bytes=0)
