"""The load generator's worker process, against loopback ports that refuse or never answer
(no inference server): where it runs, Stop, a worker that dies or hangs, and its end."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from workbench.bench import load_process
from workbench.bench.load_generator import LoadResult
from workbench.bench.load_process import LoadPlan, LoadProcess, LoadProcessError
from workbench.bench.senders import InferCall


def closed_port() -> int:
    """A loopback port nothing listens on (connections are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def plan(url: str, protocol: str = "http") -> LoadPlan:
    arrays = {"INPUT": np.ones((1, 4), dtype=np.float32)}
    return LoadPlan(protocol, url, InferCall("linear", arrays, {"INPUT": "FP32"}, ["OUTPUT"]))


def is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def run(
    process: LoadProcess, load: LoadPlan, duration_s: float, stop: threading.Event | None = None
) -> LoadResult:
    return asyncio.run(process.run(load, 2, duration_s, stop or threading.Event()))


def test_the_load_runs_in_a_worker_process_that_close_ends() -> None:
    process = LoadProcess()
    load = plan(f"127.0.0.1:{closed_port()}")
    try:
        first = run(process, load, 0.2)
        second = run(process, load, 0.2)
    finally:
        process.close()
    # one worker served both jobs, and it is not this process
    assert len(process.pids) == 1 and process.pids[0] != os.getpid()
    for result in (first, second):
        assert result.concurrency == 2 and result.errors > 0 and not result.latencies_s
        assert "cannot connect to 127.0.0.1" in result.first_error
        assert 0.2 <= result.elapsed_s < 5
    assert process.pid is None and is_gone(process.pids[0])


def test_grpc_plans_run_there_too() -> None:
    process = LoadProcess()
    try:
        result = run(process, plan(f"127.0.0.1:{closed_port()}", "grpc"), 0.2)
    finally:
        process.close()
    assert result.errors > 0 and "failed to connect" in result.first_error.lower()


def test_stop_ends_a_running_job_promptly() -> None:
    process = LoadProcess()
    stop = threading.Event()

    load = plan(f"127.0.0.1:{closed_port()}")

    async def main() -> tuple[LoadResult, float]:
        # A first short job starts the worker: on a slow machine its start-up alone took more
        # than the 2 s this test used to wait, and the stop then came before the job began.
        await process.run(load, 2, 0.2, threading.Event())
        began = time.monotonic()
        asyncio.get_running_loop().call_later(1.0, stop.set)  # while the job runs
        return await process.run(load, 2, 60.0, stop), time.monotonic() - began

    try:
        result, took = asyncio.run(main())
    finally:
        process.close()
    assert took < 13
    assert result.elapsed_s < 13 and result.errors > 0


def test_a_killed_worker_is_an_error_and_the_next_job_gets_a_new_one() -> None:
    process = LoadProcess()
    load = plan(f"127.0.0.1:{closed_port()}")

    async def kill_mid_job() -> LoadResult:
        job = asyncio.ensure_future(process.run(load, 3, 60.0, threading.Event()))
        await asyncio.sleep(2.0)
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)  # the worker this test's LoadProcess started
        return await asyncio.wait_for(job, 15)

    try:
        with pytest.raises(LoadProcessError) as failed:
            asyncio.run(kill_mid_job())
        assert process.pid is None  # reaped
        after = run(process, load, 0.2)
    finally:
        process.close()
    message = str(failed.value)
    assert f"(pid {process.pids[0]}) ended while measuring concurrency 3" in message
    assert "killed by SIGKILL" in message and "not measured" in message
    assert len(process.pids) == 2 and len(set(process.pids)) == 2
    assert after.errors > 0 and all(is_gone(pid) for pid in process.pids)


def test_a_worker_that_does_not_stop_is_ended(
    silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load_process, "STOP_GRACE_S", 0.5)
    process = LoadProcess()
    stop = threading.Event()

    async def main() -> LoadResult:
        asyncio.get_running_loop().call_later(2.0, stop.set)
        return await process.run(plan(silent_server), 2, 60.0, stop)

    began = time.monotonic()
    with pytest.raises(LoadProcessError, match=r"did not stop within 0\.5 s of Stop"):
        asyncio.run(main())
    assert time.monotonic() - began < 15
    assert process.pid is None and is_gone(process.pids[0])
