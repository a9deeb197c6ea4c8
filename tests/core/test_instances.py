"""The instance pool's hand-over: futures and ``when_free`` callbacks, first come first served."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ExecResult, InstanceContext
from workbench.core.instances import InstancePool, Worker
from workbench.core.rate_limiter import RateLimiter
from workbench.core.request import InferRequest


class _Instance:
    def execute(self, requests: list[InferRequest]) -> list[ExecResult]:
        return [ExecResult() for _ in requests]

    def close(self) -> None:
        pass


class _Backend:
    def create_instance(self, context: InstanceContext) -> _Instance:
        return _Instance()


def _contexts(count: int) -> list[InstanceContext]:
    config = text_format.Parse('name: "m" backend: "python"', ModelConfig())
    return [
        InstanceContext("m", 1, config, Path("m"), Path("m/1"), f"m_0_{index}")
        for index in range(count)
    ]


async def _pool(count: int, limiter: RateLimiter | None = None) -> InstancePool:
    pool = InstancePool(_contexts(count), limiter=limiter)
    await pool.create(_Backend())  # type: ignore[arg-type]
    return pool


def test_a_callback_is_handed_the_instance_inside_release_after_earlier_waiters() -> None:
    async def scenario() -> None:
        pool = await _pool(1)
        held = pool.try_acquire()
        assert held is not None
        first = asyncio.ensure_future(pool.acquire())  # waits before the callback
        await asyncio.sleep(0)
        taken: list[Worker] = []
        assert pool.when_free(taken.append)
        assert pool.try_acquire() is None  # someone waits: nobody jumps the queue

        pool.release(held)
        assert taken == []  # the earlier waiter gets it
        worker = await first
        assert worker is held

        pool.release(worker)
        assert taken == [held]  # handed over within release, no loop turn in between
        pool.release(held)
        assert pool.try_acquire() is held  # no waiter left: idle again
        await pool.close()

    asyncio.run(scenario())


def test_under_a_rate_limiter_nothing_is_registered() -> None:
    async def scenario() -> None:
        pool = await _pool(1, RateLimiter())
        held = pool.try_acquire()
        assert held is not None
        taken: list[Any] = []
        assert not pool.when_free(taken.append)
        pool.release(held)
        assert taken == []
        assert pool.try_acquire() is held
        await pool.close()

    asyncio.run(scenario())


def test_close_drops_callbacks_and_cancels_futures() -> None:
    async def scenario() -> None:
        pool = await _pool(1)
        assert pool.try_acquire() is not None
        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        taken: list[Worker] = []
        assert pool.when_free(taken.append)
        await pool.close()
        await asyncio.sleep(0)
        assert waiting.cancelled()
        assert taken == []

    asyncio.run(scenario())


def test_an_instance_held_for_another_waiter_is_not_waited_for_by_a_callback() -> None:
    """An idle instance that a waiter for a given index holds back is one ``acquire`` takes
    at once: ``when_free`` refuses, rather than waiting for a release that may never come."""

    async def scenario() -> None:
        pool = await _pool(2)
        first = pool.try_acquire()
        assert first is not None and first.index == 0
        wants_first = asyncio.ensure_future(pool.acquire(0))  # instance 1 stays idle
        await asyncio.sleep(0)
        assert pool.try_acquire() is None
        assert not pool.when_free(lambda worker: None)
        assert (await pool.acquire()).index == 1
        pool.release(first)
        assert (await wants_first) is first
        await pool.close()

    asyncio.run(scenario())


def test_a_cancelled_acquirer_does_not_hold_back_a_callback() -> None:
    async def scenario() -> None:
        pool = await _pool(1)
        held = pool.try_acquire()
        assert held is not None
        gave_up = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        gave_up.cancel()
        await asyncio.sleep(0)
        taken: list[Worker] = []
        assert pool.when_free(taken.append)
        pool.release(held)
        assert taken == [held]
        await pool.close()

    asyncio.run(scenario())
