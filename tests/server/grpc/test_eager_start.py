"""``native.start_eagerly``: a call's coroutine runs up to its first wait in the loop step that
read the call, then on in a task, as a task would have run it."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import grpc
import pytest

from workbench.server.grpc import native
from workbench.server.grpc.native import start_eagerly


def test_a_coroutine_that_never_waits_ends_in_the_call() -> None:
    events: list[str] = []

    async def quick() -> None:
        events.append("ran")

    async def scenario() -> None:
        task = start_eagerly(asyncio.get_running_loop(), quick())
        events.append("returned")
        assert task is None or task.done()

    asyncio.run(scenario())
    assert events == ["ran", "returned"]


def test_the_first_step_runs_before_the_loop_does_anything_else() -> None:
    events: list[str] = []

    async def call(gate: asyncio.Future[int]) -> int:
        events.append("submitted")
        value = await gate
        events.append(f"answered {value}")
        return value

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[int] = loop.create_future()
        loop.call_soon(events.append, "next loop callback")
        task = start_eagerly(loop, call(gate))
        events.append("returned")
        assert task is not None and not task.done()
        await asyncio.sleep(0)
        gate.set_result(7)
        assert await task == 7

    asyncio.run(scenario())
    assert events == ["submitted", "returned", "next loop callback", "answered 7"]


def test_a_coroutine_waiting_twice_is_driven_to_its_end() -> None:
    async def twice(first: asyncio.Future[int], second: asyncio.Future[int]) -> None:
        seen.append(await first)
        await asyncio.sleep(0)  # a bare yield to the loop
        seen.append(await second)

    seen: list[int] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first, second = loop.create_future(), loop.create_future()
        task = start_eagerly(loop, twice(first, second))
        assert task is not None
        loop.call_soon(first.set_result, 1)
        loop.call_later(0.01, second.set_result, 2)
        await asyncio.wait_for(task, 5)

    asyncio.run(scenario())
    assert seen == [1, 2]


@pytest.mark.parametrize(
    "task_ran_first",
    [True, False],  # False: a call and its cancellation read in the same drain
    ids=["cancelled-while-waiting", "cancelled-before-the-task-ran"],
)
def test_cancelling_the_task_reaches_the_coroutine_where_it_waits(task_ran_first: bool) -> None:
    events: list[str] = []

    async def call(gate: asyncio.Future[None]) -> None:
        try:
            await gate
        except asyncio.CancelledError:
            events.append("cancelled while waiting")
            raise

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        task = start_eagerly(loop, call(gate))
        assert task is not None
        if task_ran_first:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gate.cancelled()  # as a task cancels the future it waits on

    asyncio.run(scenario())
    assert events == ["cancelled while waiting"]


def test_a_failure_after_the_first_wait_is_the_task_s() -> None:
    async def call(gate: asyncio.Future[None]) -> None:
        await gate
        raise ValueError("after the wait")

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        task = start_eagerly(loop, call(gate))
        assert task is not None
        gate.set_result(None)
        with pytest.raises(ValueError, match="after the wait"):
            await task

    asyncio.run(scenario())


def test_what_the_first_step_sets_stays_with_the_call() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    seen: list[str] = []

    async def call(gate: asyncio.Future[None]) -> None:
        marker.set("the call's")
        await gate
        seen.append(marker.get())

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        task = start_eagerly(loop, call(gate))
        assert task is not None
        assert marker.get() == "unset"  # the caller's context is untouched
        gate.set_result(None)
        await task

    asyncio.run(scenario())
    assert seen == ["the call's"]


def test_a_first_step_that_yields_to_the_loop_is_resumed() -> None:
    async def call() -> str:
        await asyncio.sleep(0)  # a bare yield, no future
        return "done"

    async def scenario() -> None:
        task = start_eagerly(asyncio.get_running_loop(), call())
        assert task is not None
        assert await task == "done"

    asyncio.run(scenario())


@pytest.mark.skipif(not native.available(), reason="the native gRPC front end is not built here")
def test_the_loop_sends_a_reply_itself_only_when_nothing_else_waits() -> None:
    # Two calls read in one drain, each answered in its first step: the first reply goes to
    # the sender thread (another event of the drain is still to be handled), the last is
    # sent by the loop itself.
    finished: list[tuple[int, bool]] = []

    class Transport:
        def __init__(self, events: list[tuple[Any, ...]]) -> None:
            self.events = events

        def drain(self) -> list[tuple[Any, ...]]:
            events, self.events = self.events, []
            return events

        def finish(self, call_id: int, code: int, details: str, reply: Any = None,
                   tell_done: bool = True, here: bool = False) -> None:  # fmt: skip
            finished.append((call_id, here))

    async def live(request: Any, context: Any) -> Any:
        return request

    handler = grpc.unary_unary_rpc_method_handler(
        live, request_deserializer=bytes, response_serializer=bytes
    )
    method = "/inference.GRPCInferenceService/ServerLive"

    async def scenario() -> None:
        server = native.NativeServer({method: handler}, {})
        server._loop = asyncio.get_running_loop()
        call_event = native._native.CALL
        calls = [(call_event, 1, method, (), b""), (call_event, 2, method, (), b"")]
        server.native = Transport(calls)
        server._drain()

    asyncio.run(scenario())
    assert finished == [(1, False), (2, True)]
