"""The closed-loop load generator, driven with fake requests (no server)."""

from __future__ import annotations

import asyncio
import math
import sys
import threading

import pytest

from workbench.bench.load_generator import InferSender, LoadResult, closed_loop
from workbench.bench.senders import InferCall
from workbench.errors import InvalidArgumentError


class FakeServer:
    """Answers after ``delay_s``; fails every ``fail_every``-th request; tracks concurrency."""

    def __init__(self, delay_s: float = 0.002, fail_every: int = 0) -> None:
        self.delay_s = delay_s
        self.fail_every = fail_every
        self.sent = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self) -> None:
        self.sent += 1
        number = self.sent
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay_s)
            if self.fail_every and number % self.fail_every == 0:
                raise RuntimeError(f"request {number} refused")
        finally:
            self.in_flight -= 1


def test_concurrency_workers_keep_exactly_that_many_requests_in_flight() -> None:
    server = FakeServer()
    result = asyncio.run(closed_loop(server, concurrency=4, duration_s=0.2))
    assert server.most_in_flight == 4
    assert len(result.latencies_s) == server.sent > 20
    assert result.errors == 0 and result.first_error == ""
    assert 0.2 <= result.elapsed_s < 5.0  # generous: CI machines stall now and then
    assert result.throughput == pytest.approx(len(result.latencies_s) / result.elapsed_s)
    assert all(latency >= 0.002 for latency in result.latencies_s)
    # how busy this machine's CPUs were over exactly the measured time (/proc/stat, Linux)
    assert 0.0 <= result.host_cpu <= 1.0 or not sys.platform.startswith("linux")


def test_failures_are_counted_and_the_load_goes_on() -> None:
    # Ended by request count, not by time: a stalled CI machine may send only two in 0.15 s.
    stop = threading.Event()
    server = FakeServer(fail_every=3)

    async def send() -> None:
        if server.sent + 1 >= 12:
            stop.set()
        await server()

    result = asyncio.run(closed_loop(send, concurrency=2, duration_s=30, stop=stop))
    assert server.sent >= 12
    assert result.errors == server.sent // 3
    assert result.first_error == "request 3 refused"
    assert len(result.latencies_s) == server.sent - result.errors


def test_a_server_refusing_at_once_does_not_hang_the_loop() -> None:
    async def refuse() -> None:
        raise RuntimeError("no")

    result = asyncio.run(closed_loop(refuse, concurrency=3, duration_s=0.05))
    assert result.errors > 0 and not result.latencies_s and result.throughput == 0.0


def test_stop_ends_the_run_early() -> None:
    stop = threading.Event()
    server = FakeServer()

    async def main() -> LoadResult:
        asyncio.get_running_loop().call_later(0.05, stop.set)
        return await closed_loop(server, concurrency=2, duration_s=30, stop=stop)

    result = asyncio.run(main())
    assert result.elapsed_s < 5 and server.sent > 0


def test_percentiles() -> None:
    result = LoadResult(1, latencies_s=[i / 1000 for i in range(1, 101)], elapsed_s=1.0)
    found = result.percentiles_ms()
    assert found["p50_ms"] == pytest.approx(50.5)
    assert found["p99_ms"] == pytest.approx(99.01)
    assert found["avg_ms"] == pytest.approx(50.5)
    assert found["p90_ms"] < found["p95_ms"] < found["p99_ms"]
    assert all(math.isnan(v) for v in LoadResult(1).percentiles_ms().values())


def test_unknown_protocol() -> None:
    with pytest.raises(InvalidArgumentError, match="protocol must be 'http' or 'grpc'"):
        InferSender("websocket", "127.0.0.1:1", InferCall("m", {}, {}, []))
