"""The HTTP front end's wire behaviour (``HttpConnection``, ``HttpFrontend``), on raw sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server.conftest import RunningServer
from tests.server.fake_core import FakeCore
from workbench.core.request import InferRequest, InferResponse
from workbench.server.http import create_app
from workbench.server.http.body_reader import BodyReader
from workbench.server.http.connection import HttpConnection
from workbench.server.http.frontend import HttpFrontend
from workbench.server.http.messages import Reply

INFER_BODY = json.dumps(
    {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}
).encode()


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def post(path: str, body: bytes, *extra: bytes) -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % (path.encode(), len(body))
    return head + b"".join(extra) + b"\r\n" + body


def get(path: str, *extra: bytes, version: bytes = b"1.1") -> bytes:
    return b"GET %s HTTP/%s\r\nHost: x\r\n%s\r\n" % (path.encode(), version, b"".join(extra))


class Reader:
    """Reads whole replies (``content-length`` framed) off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def answer(self) -> Answer:
        for _ in range(1000):
            if b"\r\n\r\n" in self.buffer:
                break
            assert self._fill(), f"connection closed; got {self.buffer!r}"
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines)
        length = int(headers.get(b"content-length", b"0"))
        for _ in range(1000):
            if len(self.buffer) >= length:
                break
            assert self._fill(), "connection closed mid-body"
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Answer(int(status_line.split()[1]), headers, body)

    def closed(self) -> bool:
        """True once the server has closed the connection (and sent nothing more)."""
        for _ in range(1000):
            if not self._fill():
                return self.buffer == b""
        return False


def test_pipelined_requests_are_answered_in_order(running: RunningServer) -> None:
    with connect(running.url) as sock:
        sock.sendall(
            get("/v2/health/live")
            + post("/v2/models/add_one/infer", INFER_BODY)
            + get("/v2/models/nope/ready")
            + get("/v2/models/add_one")
        )
        reader = Reader(sock)
        answers = [reader.answer() for _ in range(4)]
    assert [a.status for a in answers] == [200, 200, 400, 200]
    assert json.loads(answers[1].body)["outputs"][0]["data"] == [1.0] * 16
    assert json.loads(answers[3].body)["name"] == "add_one"


def test_expect_100_continue_is_honoured(running: RunningServer) -> None:
    head = (
        b"POST /v2/models/add_one/infer HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\n\r\n" % len(INFER_BODY)
    )
    with connect(running.url) as sock:
        sock.sendall(head)
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(INFER_BODY)
        answer = Reader(sock).answer()
    assert answer.status == 200


def test_bytes_that_are_not_http_get_400_and_a_closed_connection(running: RunningServer) -> None:
    with connect(running.url) as sock:
        sock.sendall(b"\x16\x03\x01 this is not http\r\n\r\n")
        reader = Reader(sock)
        answer = reader.answer()
        assert reader.closed()
    assert answer.status == 400
    assert json.loads(answer.body) == {"error": "Invalid HTTP request received."}


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_refused_and_the_connection_serves_on(
    running: RunningServer, chunked: bool
) -> None:
    body = b"x" * ((1 << 20) + 10)  # the fixture's app takes 1 MiB
    if chunked:
        request = (
            b"POST /v2/models/add_one/infer HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        )
    else:
        request = post("/v2/models/add_one/infer", body)
    with connect(running.url) as sock:
        sock.sendall(request + get("/v2/health/live"))
        reader = Reader(sock)
        refused, after = reader.answer(), reader.answer()
    assert refused.status == 400
    assert "exceeds the maximum allowed value of 1048576 bytes" in json.loads(refused.body)["error"]
    assert after.status == 200


def _answered_then_closed(url: str, request: bytes) -> None:
    """``request`` gets 200 with ``Connection: close``, then the server hangs up."""
    with connect(url) as sock:
        sock.sendall(request)
        reader = Reader(sock)
        answer = reader.answer()
        assert reader.closed()
    assert answer.status == 200
    assert answer.headers[b"connection"] == b"close"


def test_connection_close_and_http_1_0_end_the_connection(running: RunningServer) -> None:
    for request in (get("/v2/health/live", b"Connection: close\r\n"), get("/v2", version=b"1.0")):
        _answered_then_closed(running.url, request)


def test_keep_alive_serves_many_requests_on_one_connection(running: RunningServer) -> None:
    with connect(running.url) as sock:
        reader = Reader(sock)
        for _ in range(50):
            sock.sendall(post("/v2/models/add_one/infer", INFER_BODY))
            answer = reader.answer()
            assert answer.status == 200
            assert b"connection" not in answer.headers


def test_a_percent_encoded_path_is_decoded(running: RunningServer) -> None:
    with connect(running.url) as sock:
        sock.sendall(get("/v2/models/add%5Fone/ready"))
        assert Reader(sock).answer().status == 200


# -- stopping ----------------------------------------------------------------------------------
class SlowCore(FakeCore):
    """Infer takes ``delay_s``, so that a request is in flight when the server stops."""

    delay_s = 0.5

    async def infer(self, request: InferRequest) -> InferResponse:
        await asyncio.sleep(self.delay_s)
        return await super().infer(request)


@dataclass
class Stoppable:
    url: str
    stop: threading.Event
    done: threading.Event


@pytest.fixture
def stoppable() -> Iterator[Stoppable]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    frontend = HttpFrontend(create_app(SlowCore()), sock, exit_timeout_s=5)  # type: ignore[arg-type]
    loop = asyncio.new_event_loop()
    started, stop, done = threading.Event(), threading.Event(), threading.Event()

    async def main() -> None:
        await frontend.start()
        started.set()
        await frontend.serve()
        done.set()

    thread = threading.Thread(target=lambda: loop.run_until_complete(main()), daemon=True)
    thread.start()
    assert started.wait(10)
    stop_thread = threading.Thread(
        target=lambda: stop.wait(30) and loop.call_soon_threadsafe(frontend.request_exit),
        daemon=True,
    )
    stop_thread.start()
    yield Stoppable(f"http://127.0.0.1:{sock.getsockname()[1]}", stop, done)
    stop.set()
    thread.join(timeout=10)
    loop.close()
    sock.close()


def test_stopping_finishes_the_request_in_flight_and_closes_idle_connections(
    stoppable: Stoppable,
) -> None:
    with connect(stoppable.url) as busy, connect(stoppable.url) as idle:
        idle.sendall(get("/v2/health/live"))
        idle_reader = Reader(idle)
        assert idle_reader.answer().status == 200
        busy.sendall(post("/v2/models/add_one/infer", INFER_BODY))
        time.sleep(0.1)  # the infer is now in flight
        stoppable.stop.set()
        assert idle_reader.closed()
        reader = Reader(busy)
        answer = reader.answer()
        assert answer.status == 200
        assert answer.headers[b"connection"] == b"close"
        assert reader.closed()
    assert stoppable.done.wait(10)
    with pytest.raises(OSError):
        connect(stoppable.url).close()


def test_past_the_exit_timeout_the_request_is_cut_and_no_task_outlives_serve() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    core = SlowCore()
    core.delay_s = 3600  # an infer no run outlasts: serving ends only because it was cut
    frontend = HttpFrontend(create_app(core), sock, exit_timeout_s=0.1)  # type: ignore[arg-type]

    async def main() -> tuple[bytes, set[asyncio.Task[object]]]:
        await frontend.start()
        serving = asyncio.create_task(frontend.serve())
        port = sock.getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        _, idle = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post("/v2/models/add_one/infer", INFER_BODY))
        await asyncio.sleep(0.1)  # the infer is in flight
        frontend.request_exit()
        await asyncio.wait_for(serving, 30)  # a hang guard, far below the infer's hour
        left = asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]
        answer = await reader.read()  # the connection was cut without a reply
        writer.close()
        idle.close()
        return answer, left

    answer, left = asyncio.run(main())
    sock.close()
    assert answer == b""
    assert not left


def _chunked_reply(sock: socket.socket, buffer: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """One chunked reply off ``sock``: (head, body chunks joined, what came after it)."""
    while b"\r\n\r\n" not in buffer:
        buffer += sock.recv(65536)
    head, _, rest = buffer.partition(b"\r\n\r\n")
    body = b""
    while True:
        while b"\r\n" not in rest:
            rest += sock.recv(65536)
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        while len(rest) < size + 2:
            rest += sock.recv(65536)
        body, rest = body + rest[:size], rest[size + 2 :]
        if size == 0:
            return head, body, rest


def test_two_streamed_replies_on_one_connection_are_both_sent(running: RunningServer) -> None:
    stream = post("/v2/models/repeat/generate_stream", b'{"COUNT": 2}')
    with connect(running.url) as sock:
        sock.sendall(stream + stream + get("/v2/health/live"))
        first_head, first, rest = _chunked_reply(sock)
        second_head, second, rest = _chunked_reply(sock, rest)
        reader = Reader(sock)
        reader.buffer = rest
        after = reader.answer()
    assert first_head.startswith(b"HTTP/1.1 200") and second_head.startswith(b"HTTP/1.1 200")
    assert first == second and first.count(b"data: ") == 2
    assert after.status == 200


def test_a_reply_to_head_has_no_body(running: RunningServer) -> None:
    head_request = b"HEAD /v2/models/add_one HTTP/1.1\r\nHost: x\r\n\r\n"
    with connect(running.url) as sock:
        sock.sendall(head_request + get("/v2/health/live"))
        data = b""
        while data.count(b"\r\n\r\n") < 2:
            data += sock.recv(65536)
    first, _, rest = data.partition(b"\r\n\r\n")
    assert b"content-length: " in first.lower()
    assert rest.startswith(b"HTTP/1.1 200")  # the next reply follows the head at once


def test_an_upgrade_we_do_not_speak_is_served_as_http_1_1(running: RunningServer) -> None:
    h2c = get(
        "/v2/health/live",
        b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n",
        b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
    )
    _answered_then_closed(running.url, h2c)


def test_a_connection_lost_after_its_wait_was_cancelled_ends_quietly() -> None:
    async def main() -> None:
        connection = HttpConnection(create_app(FakeCore()), set(), set())  # type: ignore[arg-type]
        waiter = asyncio.get_running_loop().create_future()
        waiter.cancel()  # HttpFrontend cancels serving tasks past the exit timeout
        connection._waiter = waiter
        connection.connection_lost(None)
        assert connection.closed and connection._waiter is None

    asyncio.run(main())


def test_a_reply_that_stops_listening_leaves_the_disconnect_wait_to_the_next() -> None:
    async def main() -> None:
        connection = HttpConnection(create_app(FakeCore()), set(), set())  # type: ignore[arg-type]
        first = asyncio.ensure_future(connection._receive())
        await asyncio.sleep(0)
        first.cancel()  # a streamed reply that finished cancels its disconnect watch
        await asyncio.gather(first, return_exceptions=True)
        second = asyncio.ensure_future(connection._receive())
        await asyncio.sleep(0.01)
        assert not second.done()  # still waiting for the client to go
        connection.connection_lost(None)
        assert await second == {"type": "http.disconnect"}

    asyncio.run(main())


#: an infer body over 64 KiB (JSON allows the trailing spaces), read in place when it spans reads
LARGE_INFER_BODY = INFER_BODY + b" " * 300_000


@pytest.mark.parametrize("head_alone", [False, True])
def test_a_large_body_read_in_place_is_served_and_the_next_request_parsed(
    running: RunningServer, head_alone: bool
) -> None:
    request = post("/v2/models/add_one/infer", LARGE_INFER_BODY)
    head_end = request.index(b"\r\n\r\n") + 4
    with connect(running.url) as sock:
        if head_alone:  # no byte of the body comes with its head
            sock.sendall(request[:head_end])
            time.sleep(0.05)
            request = request[head_end:]
        sock.sendall(request + post("/v2/models/add_one/infer", INFER_BODY))
        reader = Reader(sock)
        answers = [reader.answer() for _ in range(2)]
        sock.sendall(get("/v2/health/live"))
        assert reader.answer().status == 200
    for answer in answers:
        assert answer.status == 200
        assert json.loads(answer.body)["outputs"][0]["data"] == [1.0] * 16


@pytest.mark.parametrize("body", [INFER_BODY, LARGE_INFER_BODY], ids=["small", "large"])
def test_bytes_after_a_request_that_closes_the_connection_are_not_served(
    running: RunningServer, body: bytes
) -> None:
    request = post("/v2/models/add_one/infer", body, b"Connection: close\r\n")
    with connect(running.url) as sock:
        sock.sendall(request + get("/v2/health/live"))
        reader = Reader(sock)
        served = reader.answer()
        try:
            assert reader.closed()
        except ConnectionResetError:
            pass  # closed with the unserved request unread
    assert (served.status, served.headers[b"connection"]) == (200, b"close")


class _Transport:
    """What a connection uses of its transport, for driving one without a socket."""

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def test_a_connection_lost_before_its_task_ran_ends_the_task() -> None:
    # The client sent a request and went (a reset) in the loop step that read it: the task
    # made for the request then finds the queue dropped and must end, not wait for a request
    # that can never come (it held the connection until the server's exit).
    async def main() -> None:
        connection = HttpConnection(create_app(FakeCore()), set(), set())  # type: ignore[arg-type]
        connection.connection_made(_Transport())  # type: ignore[arg-type]
        connection.data_received(get("/v2/health/live"))
        connection.connection_lost(ConnectionResetError())
        assert connection._serving is not None
        await asyncio.wait_for(connection._serving, 5)
        assert not connection.busy

    asyncio.run(main())


def _echo_request(element: bytes) -> bytes:
    """An infer of ``echo_bytes`` with ``element`` as its one BYTES input, binary both ways."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "datatype": "BYTES",
                    "shape": [1],
                    "parameters": {"binary_data_size": 4 + len(element)},
                }
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = header + len(element).to_bytes(4, "little") + element
    return post(
        "/v2/models/echo_bytes/infer",
        body,
        b"Inference-Header-Content-Length: %d\r\n" % len(header),
    )


def _settled(count: Callable[[], int]) -> int:
    """``count()`` once it has stayed the same for a second (at most 20 s of polling)."""
    last, same = count(), 0
    for _ in range(400):
        time.sleep(0.05)
        now = count()
        same = same + 1 if now == last else 0
        last = now
        if same >= 20:
            break
    return last


def test_a_client_that_does_not_read_holds_back_its_replies(running: RunningServer) -> None:
    """A client pipelining requests without reading their replies stops being served (the
    replies are not all held in the server's memory), and gets every reply, in order, once
    it reads."""
    size = 512 * 1024
    # What the kernel may hold of the replies: the server's send buffer grows up to
    # tcp_wmem's maximum (4 MiB on Debian); the client's receive buffer is kept small.
    in_kernel = int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2]) // size + 1
    count = 3 * in_kernel
    elements = [bytes([i % 256]) * size for i in range(count)]
    served_before = running.core.success.get("echo_bytes", 0)

    def served() -> int:
        return running.core.success.get("echo_bytes", 0) - served_before

    host, port = running.address.split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)  # before connect
    sock.settimeout(30)
    sock.connect((host, int(port)))
    sent: list[BaseException] = []

    def send_all() -> None:  # blocks while the server does not read
        try:
            sock.sendall(b"".join(_echo_request(e) for e in elements))
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            sent.append(exc)

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    try:
        held_back = _settled(served)
        # Beside the kernel's: one reply in the transport past its high-water mark, one being
        # written. Without flow control every request is served.
        assert held_back <= in_kernel + 2, f"{held_back} of {count} served before a read"
        reader = Reader(sock)
        answers = [reader.answer() for _ in range(count)]
        sender.join(timeout=30)
        assert not sender.is_alive() and not sent
    finally:
        sock.close()
    assert [a.status for a in answers] == [200] * count
    for element, answer in zip(elements, answers, strict=True):
        assert answer.body.endswith(len(element).to_bytes(4, "little") + element)
    assert served() == count


def test_a_body_being_read_in_place_leaves_flow_control_to_its_connection() -> None:
    """Replies to earlier pipelined requests may fill the transport while a later request's
    large body is read by a ``BodyReader``: their pause and resume reach the connection."""
    heard: list[str] = []

    class Owner:
        def body_read(self, body: memoryview) -> None: ...

        def eof_received(self) -> bool | None:
            return None

        def connection_lost(self, exc: Exception | None) -> None: ...

        def pause_writing(self) -> None:
            heard.append("pause")

        def resume_writing(self) -> None:
            heard.append("resume")

    reader = BodyReader(Owner(), 16, [])
    reader.pause_writing()
    reader.resume_writing()
    assert heard == ["pause", "resume"]


def test_a_client_gone_while_its_replies_wait_to_be_read_frees_the_wait() -> None:
    async def main() -> None:
        connection = HttpConnection(create_app(FakeCore()), set(), set())  # type: ignore[arg-type]
        connection.pause_writing()
        waiting = asyncio.ensure_future(connection.drained())
        await asyncio.sleep(0.01)
        assert not waiting.done()  # held until the client reads
        connection.connection_lost(None)
        await asyncio.wait_for(waiting, 1)
        connection.pause_writing()  # a late pause from a closed transport holds nobody
        await asyncio.wait_for(connection.drained(), 1)

    asyncio.run(main())


class _HeldApp:
    """An app whose every request waits for ``go``; answers 200 with an empty body. What
    happens is noted in ``events``, which its transport shares."""

    max_input_bytes = 64 << 20

    def __init__(self, events: list[str]) -> None:
        self.tracer = type("Off", (), {"enabled": False})()
        self.go = asyncio.Event()
        self.events = events

    async def handle(self, request: object) -> Reply:
        await self.go.wait()
        self.events.append("served")
        return Reply(200, b"")


class _FlowTransport(_Transport):
    """Notes the flow-control calls a connection makes; ``full`` makes each write fill it
    past its high-water mark (the transport then calls ``pause_writing``)."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.protocol: HttpConnection | None = None
        self.full = False
        self.closed = False

    def pause_reading(self) -> None:
        self.events.append("pause")

    def resume_reading(self) -> None:
        self.events.append("resume")

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def writelines(self, parts: object) -> None:
        if self.full and self.protocol is not None:
            self.protocol.pause_writing()

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.events.append("close")
        self.closed = True


def _held_connection() -> tuple[HttpConnection, _HeldApp, _FlowTransport, list[str]]:
    events: list[str] = []
    app, transport = _HeldApp(events), _FlowTransport(events)
    connection = HttpConnection(app, set(), set())  # type: ignore[arg-type]
    connection.connection_made(transport)  # type: ignore[arg-type]
    transport.protocol = connection
    return connection, app, transport, events


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(200):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("it did not happen")


def test_reading_stops_while_large_bodies_wait_and_goes_on_at_half() -> None:
    """Pipelined requests with large bodies: reading stops once the bodies queued hold
    ``_MAX_QUEUED_BYTES`` (long before ``_MAX_QUEUED`` requests) and goes on once they are
    down to half, with a request still queued."""

    async def main() -> None:
        connection, app, _, events = _held_connection()
        body = b"x" * (3 << 19)  # 1.5 MiB
        for _ in range(4):  # the first is served (held); 4.5 MiB queue behind it
            connection.data_received(post("/v2/models/m/infer", body))
            await asyncio.sleep(0)
        assert events == ["pause"]
        app.go.set()
        await _until(lambda: events.count("served") == 4)
        assert events == ["pause", "served", "served", "resume", "served", "served"]
        connection.connection_lost(None)

    asyncio.run(main())


def test_a_server_stopping_while_a_reply_waits_to_be_read_closes_once_it_is() -> None:
    async def main() -> None:
        connection, app, transport, events = _held_connection()
        transport.full = True
        app.go.set()
        connection.data_received(get("/v2/health/live"))
        await _until(lambda: connection.writing_paused)
        connection.shutdown()  # between replies, but the last one is not read yet
        assert "close" not in events
        connection.resume_writing()  # the client read it
        await _until(lambda: "close" in events)
        connection.connection_lost(None)

    asyncio.run(main())
