"""The sweep's senders: a request encoded once and sent again and again, answered and failed
as tritonclient would be, over connections they keep, reopen and give up as HTTP says."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from workbench.bench.load_generator import InferSender, closed_loop
from workbench.bench.senders import HttpSender, InferCall, http_error_message
from workbench.notebook import Workbench

PAIR_ARRAYS = {"A": np.ones((1, 2), np.int32), "B": np.ones((1, 3), np.float32)}
PAIR_TYPES = {"A": "INT32", "B": "FP32"}


def sender(bench: Workbench, protocol: str, model: str = "pair", **arrays: Any) -> InferSender:
    url = bench.server.http_address if protocol == "http" else bench.grpc_url
    assert url is not None
    return InferSender(protocol, url, InferCall(model, arrays or PAIR_ARRAYS, PAIR_TYPES, ["SUM"]))


def successes(bench: Workbench, model: str) -> int:
    stats = bench.client("http").get_inference_statistics(model)
    return sum(int(m["inference_stats"]["success"]["count"]) for m in stats["model_stats"])


def send(target: InferSender, times: int = 1) -> None:
    async def main() -> None:
        try:
            for _ in range(times):
                await target()
        finally:
            await target.close()

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_each_send_is_one_successful_inference(sweep_bench: Workbench, protocol: str) -> None:
    before = successes(sweep_bench, "pair")
    send(sender(sweep_bench, protocol), times=5)
    assert successes(sweep_bench, "pair") == before + 5


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize(
    ("model", "arrays"),
    [("missing", PAIR_ARRAYS), ("pair", {"A": np.ones((1, 3), np.int32), "B": PAIR_ARRAYS["B"]})],
    ids=["unknown model", "wrong shape"],
)
def test_a_refusal_reads_as_tritonclients_message(
    sweep_bench: Workbench, protocol: str, model: str, arrays: dict[str, np.ndarray]
) -> None:
    module: Any = tritonclient.http if protocol == "http" else tritonclient.grpc
    inputs = []
    for name, array in arrays.items():
        tensor = module.InferInput(name, list(array.shape), PAIR_TYPES[name])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    with pytest.raises(InferenceServerException) as theirs:
        sweep_bench.client(protocol).infer(model, inputs)
    with pytest.raises(InferenceServerException) as ours:
        send(sender(sweep_bench, protocol, model, **arrays))
    assert ours.value.message() == theirs.value.message()
    assert ours.value.message()  # Triton's words, not an empty status


def test_the_http_request_is_encoded_once(
    sweep_bench: Workbench, monkeypatch: pytest.MonkeyPatch
) -> None:
    encode = tritonclient.http.InferenceServerClient.generate_request_body
    calls = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return encode(*args, **kwargs)

    monkeypatch.setattr(tritonclient.http.InferenceServerClient, "generate_request_body", counting)
    send(sender(sweep_bench, "http"), times=4)
    assert len(calls) == 1


# -- connections, against a loopback server of the test's own ---------------------------------

Answer = Callable[[int], bytes]


class FakeHttp:
    """Counts connections and requests; ``answer(n)`` is the raw reply to the n-th request,
    written ``slow[n]`` seconds after it was read."""

    def __init__(self, answer: Answer, slow: dict[int, float]) -> None:
        self.answer = answer
        self.slow = slow
        self.connections = 0
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.requests += 1
                await asyncio.sleep(self.slow.get(self.requests, 0.0))
                reply = self.answer(self.requests)
                writer.write(reply)
                await writer.drain()
                if b"Connection: close" in reply or not reply.startswith(b"HTTP/1.1"):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client went away, or the test ended while an answer was held back
        finally:
            writer.close()


def ok(body: bytes = b"{}", close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def run_against(
    answer: Answer,
    client: Callable[[HttpSender], Awaitable[Any]],
    slow: dict[int, float] | None = None,
) -> tuple[FakeHttp, Any]:
    """``client(sender)`` against a ``FakeHttp`` answering ``answer``: the fake and what
    the client returned."""
    fake = FakeHttp(answer, slow or {})

    async def main() -> Any:
        server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        target = HttpSender(f"127.0.0.1:{port}", "m", [], [])
        try:
            return await client(target)
        finally:
            await target.close()
            server.close()
            await server.wait_closed()

    return fake, asyncio.run(main())


def in_turn(times: int) -> Callable[[HttpSender], Awaitable[list[Any]]]:
    """Sends one after another; each send's result or exception, in order."""

    async def client(target: HttpSender) -> list[Any]:
        outcomes: list[Any] = []
        for _ in range(times):
            try:
                outcomes.append(await target())
            except Exception as exc:  # recorded: the test looks at which sends failed
                outcomes.append(exc)
        return outcomes

    return client


def test_one_connection_serves_requests_in_turn_and_is_reopened_after_close() -> None:
    # the third answer says Connection: close; the fourth request needs a new connection
    fake, outcomes = run_against(lambda n: ok(close=n == 3), in_turn(6))
    assert outcomes == [None] * 6
    assert fake.requests == 6 and fake.connections == 2


def test_concurrent_sends_take_a_connection_each() -> None:
    async def client(target: HttpSender) -> Any:
        return await closed_loop(target, concurrency=4, duration_s=0.3)

    fake, result = run_against(lambda n: ok(), client)
    assert result.errors == 0 and len(result.latencies_s) >= 4
    assert fake.connections == 4


def test_an_answer_that_is_not_http_fails_that_send_only() -> None:
    fake, outcomes = run_against(lambda n: b"SSH-2.0-nope\r\n\r\n" if n == 2 else ok(), in_turn(3))
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], ConnectionError) and "not HTTP" in str(outcomes[1])
    assert fake.connections == 2


def test_a_connection_closed_mid_answer_fails_that_send_only() -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{}"
    _, outcomes = run_against(lambda n: cut if n == 1 else ok(), in_turn(2))
    assert isinstance(outcomes[0], ConnectionError) and "closed the connection" in str(outcomes[0])
    assert outcomes[1] is None


def test_an_error_status_carries_the_servers_message() -> None:
    body = b'{"error":"Request for unknown model: \'m\' is not found"}'
    refusal = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    _, outcomes = run_against(lambda n: refusal, in_turn(1))
    assert isinstance(outcomes[0], InferenceServerException)
    assert outcomes[0].message() == "Request for unknown model: 'm' is not found"
    assert outcomes[0].status() == "400"


def test_error_message_without_triton_json() -> None:
    assert http_error_message(502, b"bad gateway") == "bad gateway"
    assert http_error_message(503, b"") == "HTTP 503"
    assert http_error_message(400, b'{"error": "no"}') == "no"


def test_a_send_cancelled_before_its_answer_does_not_leave_the_answer_to_the_next() -> None:
    stale = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 2\r\n\r\n{}"
    idle: list[int] = []

    async def client(target: HttpSender) -> list[Any]:
        first = asyncio.ensure_future(target())
        await asyncio.sleep(0.05)  # sent; its answer comes only after 0.3 s
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        idle.append(len(target._idle))  # the connection is not offered to the next send
        return await in_turn(1)(target)

    fake, outcomes = run_against(lambda n: stale if n == 1 else ok(), client, slow={1: 0.3})
    assert idle == [0]
    assert outcomes == [None]  # not the first request's late 400
    assert fake.connections == 2
