"""The dynamic batcher and its queue policies, against a fake executor (no model, no HTTP).

No test here races the real clock: an instance stays busy until a test opens its gate, and
queue delays and timeouts end when a test advances a ``FakeClock`` past them.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from tests.core.fake_clock import FakeClock, settle
from workbench._types import Tensor
from workbench.backends.base import ExecResult
from workbench.core import _deadline_timer
from workbench.core.dynamic_batcher import DynamicBatcher
from workbench.core.queue_policy import PriorityQueues
from workbench.core.request import InferRequest
from workbench.core.scheduler import Pending
from workbench.core.statistics import RequestTimes
from workbench.errors import UnavailableError


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop (the suite has no asyncio plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@dataclass
class _Slot:
    index: int


@dataclass
class FakeExecutor:
    """One instance that records the requests of each execution.

    With a ``gate``, an execution holds its instance until the gate opens (an order that no
    stalled machine can change); without one it ends at the next loop turn.
    """

    instance_count: int = 1
    gate: asyncio.Event | None = None
    batches: list[list[str]] = field(default_factory=list)
    #: False: no ``when_free`` (as under a rate limiter), the batcher awaits ``acquire``
    hands_over: bool = True
    _idle: asyncio.Queue[_Slot] | None = None
    _takers: list[Callable[[_Slot], None]] = field(default_factory=list)
    #: what happened, in order: "execute <ids>", "freed" (once ``release`` returned)
    events: list[str] = field(default_factory=list)

    def _slots(self) -> asyncio.Queue[_Slot]:
        if self._idle is None:
            self._idle = asyncio.Queue()
            for i in range(self.instance_count):
                self._idle.put_nowait(_Slot(i))
        return self._idle

    async def acquire(self, index: int | None = None) -> _Slot:
        return await self._slots().get()

    def try_acquire(self) -> _Slot | None:
        slots = self._slots()
        return None if slots.empty() else slots.get_nowait()

    def when_free(self, take: Callable[[_Slot], None]) -> bool:
        if self.hands_over:
            self._takers.append(take)
        return self.hands_over

    def release(self, slot: _Slot) -> None:
        assert self._idle is not None
        if self._takers:
            self._takers.pop(0)(slot)
            return
        self._idle.put_nowait(slot)

    def execute(self, slot: _Slot, batch: list[Pending]) -> asyncio.Future[None]:
        self.batches.append([p.request.id for p in batch])
        self.events.append("execute " + " ".join(self.batches[-1]))
        return asyncio.ensure_future(self._finish(slot, batch))

    async def _finish(self, slot: _Slot, batch: list[Pending]) -> None:
        await asyncio.sleep(0)
        if self.gate is not None:
            await self.gate.wait()
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(ExecResult())
        self.release(slot)
        self.events.append("freed")


def config(text: str, max_batch_size: int = 8) -> ModelConfig:
    parsed = text_format.Parse(
        f'name: "m" max_batch_size: {max_batch_size} '
        'input [{ name: "X" data_type: TYPE_FP32 dims: [ -1 ] }] ' + text,
        ModelConfig(),
    )
    return parsed


def pending(
    request_id: str,
    width: int = 1,
    rows: int = 1,
    clock: FakeClock | None = None,
    **parameters: object,
) -> Pending:
    """A request of ``rows`` x ``width``, arriving now (on ``clock`` when given)."""
    array = np.zeros((rows, width), dtype=np.float32)
    request = InferRequest("m", id=request_id, inputs={"X": Tensor("X", "FP32", array)})
    request.parameters = dict(parameters)
    future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
    times = RequestTimes() if clock is None else RequestTimes(received=clock.now_ns())
    return Pending(request, rows, times, future)


async def submit_all(batcher: DynamicBatcher, requests: list[Pending]) -> list[object]:
    tasks = [asyncio.ensure_future(batcher.submit(p)) for p in requests]
    return await asyncio.gather(*tasks, return_exceptions=True)


async def behind_a_busy_instance(
    batcher: DynamicBatcher, executor: FakeExecutor, first: Pending, rest: list[Pending]
) -> None:
    """``first`` holds the only instance until its gate opens; ``rest`` queue meanwhile."""
    assert executor.gate is not None
    running = asyncio.ensure_future(batcher.submit(first))
    await settle()
    queued = [asyncio.ensure_future(batcher.submit(p)) for p in rest]
    await settle()
    assert executor.batches == [[first.request.id]]  # the others are still queued
    executor.gate.set()
    await asyncio.gather(running, *queued)


@in_loop
async def test_requests_queued_while_the_instance_is_busy_leave_as_one_batch() -> None:
    executor = FakeExecutor(gate=asyncio.Event())
    batcher = DynamicBatcher(config("dynamic_batching {}"), executor)
    await behind_a_busy_instance(batcher, executor, pending("a"), [pending(n) for n in "bcd"])
    assert executor.batches == [["a"], ["b", "c", "d"]]
    await batcher.close()


@in_loop
async def test_a_request_finding_an_instance_free_leaves_at_once() -> None:
    # As Triton's batcher thread, woken by each arrival: the first of three requests read in
    # one loop turn takes the idle instance alone; the others wait for it and leave together
    # (joining the turn's requests made batches larger than Triton's and left a second
    # instance idle: benchmarks/transfer.py, 2026-11-26).
    executor = FakeExecutor()
    batcher = DynamicBatcher(config("dynamic_batching {}"), executor)
    await submit_all(batcher, [pending(name) for name in "abc"])  # all in one loop turn
    assert executor.batches == [["a"], ["b", "c"]]
    await batcher.close()


@in_loop
async def test_with_two_instances_free_two_requests_take_one_each() -> None:
    executor = FakeExecutor(instance_count=2)
    batcher = DynamicBatcher(config("dynamic_batching {}"), executor)
    await submit_all(batcher, [pending(name) for name in "abc"])
    assert executor.batches == [["a"], ["b"], ["c"]]
    await batcher.close()


@in_loop
async def test_batches_never_exceed_max_batch_size_and_keep_arrival_order() -> None:
    executor = FakeExecutor(gate=asyncio.Event())
    batcher = DynamicBatcher(config("dynamic_batching {}", max_batch_size=2), executor)
    await behind_a_busy_instance(batcher, executor, pending("a"), [pending(n) for n in "bcde"])
    assert executor.batches == [["a"], ["b", "c"], ["d", "e"]]
    await batcher.close()


@in_loop
async def test_requests_with_other_shapes_go_in_another_batch() -> None:
    executor = FakeExecutor(gate=asyncio.Event())
    batcher = DynamicBatcher(config("dynamic_batching {}"), executor)
    rest = [pending("b", 2), pending("c", 3), pending("d", 2)]
    await behind_a_busy_instance(batcher, executor, pending("a"), rest)
    assert executor.batches == [["a"], ["b"], ["c"], ["d"]]
    await batcher.close()


@pytest.mark.parametrize("hands_over", [True, False])
@in_loop
async def test_a_freed_instance_takes_the_queued_batch_in_the_call_that_frees_it(
    hands_over: bool,
) -> None:
    """Requests queued behind a busy instance leave within the call that frees it, before the
    loop runs anything else (Triton's batcher thread is woken by the instance); an executor
    that cannot hand over (a rate limiter's) has them sent by the task awaiting ``acquire``."""
    executor = FakeExecutor(gate=asyncio.Event(), hands_over=hands_over)
    batcher = DynamicBatcher(config("dynamic_batching {}"), executor)
    await behind_a_busy_instance(batcher, executor, pending("a"), [pending("b"), pending("c")])
    if hands_over:
        assert executor.events[:3] == ["execute a", "execute b c", "freed"]
    else:
        assert executor.events[:3] == ["execute a", "freed", "execute b c"]
    assert executor.batches == [["a"], ["b", "c"]]


@in_loop
async def test_requests_of_one_plan_batch_without_comparing_shapes() -> None:
    # A decoding plan fixes a request's shapes: only requests of another plan (or none) have
    # their shapes compared with the first's.
    executor = FakeExecutor(gate=asyncio.Event())
    batcher = DynamicBatcher(config("dynamic_batching {}"), executor)
    compared: list[str] = []
    shape_key = batcher._shape_key

    def counted(item: Pending) -> tuple[object, ...]:
        compared.append(item.request.id)
        return shape_key(item)

    batcher._shape_key = counted  # type: ignore[method-assign]
    plan, other = object(), object()
    rest = [pending(name, 2) for name in "bcde"]
    for item, its_plan in zip(rest, (plan, plan, other, plan), strict=True):
        item.request.plan = its_plan  # d: same shapes, another plan: compared, and joins
    await behind_a_busy_instance(batcher, executor, pending("a"), rest)
    assert executor.batches == [["a"], ["b", "c", "d", "e"]]
    assert compared == ["b", "d"]
    await batcher.close()


@in_loop
async def test_ragged_inputs_batch_whatever_their_shapes() -> None:
    executor = FakeExecutor(gate=asyncio.Event())
    ragged = config("dynamic_batching {}")
    ragged.input[0].allow_ragged_batch = True
    batcher = DynamicBatcher(ragged, executor)
    await behind_a_busy_instance(
        batcher, executor, pending("a"), [pending("b", 2), pending("c", 3)]
    )
    assert executor.batches == [["a"], ["b", "c"]]
    await batcher.close()


@in_loop
async def test_a_microsecond_delay_ends_on_the_microsecond() -> None:
    # On a clock moved by hand: still queued 1 ns before the delay ends, sent at its end.
    # (That the real timers keep such a deadline is test_deadline_timer.py's business.)
    clock = FakeClock()
    executor = FakeExecutor()
    batcher = DynamicBatcher(
        config("dynamic_batching { max_queue_delay_microseconds: 300 }"), executor, clock
    )
    request = asyncio.ensure_future(batcher.submit(pending("a", clock=clock)))
    await settle()
    await clock.advance(299_999)
    assert executor.batches == [] and not request.done()
    await clock.advance(1)
    await request
    assert executor.batches == [["a"]]
    await batcher.close()


@pytest.mark.parametrize("timerfd", [True, False])
@in_loop
async def test_a_microsecond_delay_is_never_cut_short_on_the_real_clock(
    timerfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lower bound only, which a slow machine cannot break: uvloop's millisecond timers
    # would round 300 us down to nothing and send the request early.
    if not timerfd:
        monkeypatch.setattr(_deadline_timer, "_TIMERFD", None)
    batcher = DynamicBatcher(
        config("dynamic_batching { max_queue_delay_microseconds: 300 }"), FakeExecutor()
    )
    for name in "abc":
        begin = time.monotonic_ns()
        await asyncio.wait_for(batcher.submit(pending(name)), 10)  # 10 s: a hang guard
        assert time.monotonic_ns() - begin >= 300_000
    await batcher.close()


@pytest.mark.skipif(_deadline_timer._TIMERFD is None, reason="needs Linux timerfd")
@in_loop
async def test_a_sub_millisecond_delay_does_not_keep_the_cpu_busy() -> None:
    batcher = DynamicBatcher(
        config("dynamic_batching { max_queue_delay_microseconds: 1500 }"), FakeExecutor()
    )
    wall, cpu = time.monotonic(), time.process_time()
    for name in "abcde":
        await batcher.submit(pending(name))
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    assert wall >= 0.0075
    assert cpu < wall / 2  # it sleeps through the delays rather than yielding until them
    await batcher.close()


@in_loop
async def test_a_request_that_would_pass_the_preferred_size_starts_the_next_batch() -> None:
    # Triton 2.51, preferred [4]: 3 rows then 3 rows -> the first goes alone when the second
    # arrives; the second waits for the delay (docs/triton-scheduling-facts.md).
    # The clock stands still unless advanced, so "a" leaving proves it left because "b"
    # arrived, not because its delay ended; "b" leaves exactly when its own delay does.
    settings = (
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 300000 }"
    )
    clock = FakeClock()
    executor = FakeExecutor()
    batcher = DynamicBatcher(config(settings), executor, clock)
    first = asyncio.ensure_future(batcher.submit(pending("a", rows=3, clock=clock)))
    await clock.advance(50_000_000)
    assert not first.done()
    second = asyncio.ensure_future(batcher.submit(pending("b", rows=3, clock=clock)))
    await first
    assert executor.batches == [["a"]]
    await clock.advance(300_000_000 - 1)
    assert not second.done()
    await clock.advance(1)
    await second
    assert executor.batches == [["a"], ["b"]]
    await batcher.close()


@in_loop
async def test_six_requests_with_preferred_four_leave_as_four_then_two() -> None:
    settings = (
        "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 200000 }"
    )
    executor = FakeExecutor()
    batcher = DynamicBatcher(config(settings), executor)
    await submit_all(batcher, [pending(name) for name in "abcdef"])
    assert executor.batches == [["a", "b", "c", "d"], ["e", "f"]]
    await batcher.close()


@in_loop
async def test_delayed_requests_run_after_those_that_did_not_time_out() -> None:
    policy = "default_queue_policy { default_timeout_microseconds: 40000 timeout_action: DELAY }"
    clock = FakeClock()
    executor = FakeExecutor(gate=asyncio.Event())
    dynamic = config(f"dynamic_batching {{ {policy} }}", max_batch_size=1)
    batcher = DynamicBatcher(dynamic, executor, clock)
    first = asyncio.ensure_future(batcher.submit(pending("a", clock=clock)))
    await settle()
    early = asyncio.ensure_future(batcher.submit(pending("b", clock=clock)))
    await clock.advance(50_000_000)  # "b" (40 ms) is past its deadline when "a" ends...
    late = asyncio.ensure_future(batcher.submit(pending("c", clock=clock)))
    await settle()  # ...and "c", just arrived, is not
    assert executor.gate is not None
    executor.gate.set()  # "a" ends
    await asyncio.gather(first, early, late)
    assert executor.batches == [["a"], ["c"], ["b"]]
    await batcher.close()


@in_loop
async def test_close_fails_queued_requests() -> None:
    executor = FakeExecutor(gate=asyncio.Event())
    batcher = DynamicBatcher(config("dynamic_batching {}", max_batch_size=1), executor)
    running = asyncio.ensure_future(batcher.submit(pending("a")))
    await settle()
    queued = asyncio.ensure_future(batcher.submit(pending("b")))
    await settle()
    assert executor.batches == [["a"]]  # "a" runs until the gate opens; "b" is queued
    closing = asyncio.ensure_future(batcher.close())
    await asyncio.wait([queued])
    assert isinstance(queued.exception(), UnavailableError)
    assert executor.gate is not None
    executor.gate.set()
    await closing
    await running
    with pytest.raises(UnavailableError):
        await batcher.submit(pending("c"))


@in_loop
async def test_a_cancelled_request_is_not_executed() -> None:
    executor = FakeExecutor(gate=asyncio.Event())
    batcher = DynamicBatcher(config("dynamic_batching {}", max_batch_size=1), executor)
    running = asyncio.ensure_future(batcher.submit(pending("a")))
    await settle()
    gone = asyncio.ensure_future(batcher.submit(pending("b")))
    kept = asyncio.ensure_future(batcher.submit(pending("c")))
    await settle()
    gone.cancel()  # while "a" still holds the instance
    assert executor.gate is not None
    executor.gate.set()
    await asyncio.gather(running, kept)
    assert executor.batches == [["a"], ["c"]]
    await batcher.close()


@pytest.mark.parametrize(
    ("default_us", "allow", "asked_us", "expected_us"),
    [
        (0, False, 5000, 0),  # no override allowed: no timeout
        (0, True, 5000, 0),  # no default: Triton ignores the request's timeout
        (10000, True, 5000, 5000),  # shorter: taken
        (10000, True, 20000, 10000),  # longer: not taken
        (10000, False, 5000, 10000),
    ],
)
@in_loop
async def test_a_request_timeout_may_only_shorten_the_default(
    default_us: int, allow: bool, asked_us: int, expected_us: int
) -> None:
    allow_text = "true" if allow else "false"
    policy = (
        f"default_queue_policy {{ default_timeout_microseconds: {default_us} "
        f"allow_timeout_override: {allow_text} }}"
    )
    queues = PriorityQueues(config(f"dynamic_batching {{ {policy} }}"))
    request = pending("a", timeout=asked_us)
    queues.push(request)
    expected = request.times.received + expected_us * 1000 if expected_us else 0
    assert request.deadline_ns == expected


@pytest.mark.parametrize(("asked", "level"), [(1, 1), (3, 3), (0, 2), (4, 2), (-1, 2)])
@in_loop
async def test_priority_levels(asked: int, level: int) -> None:
    queues = PriorityQueues(
        config("dynamic_batching { priority_levels: 3 default_priority_level: 2 }")
    )
    request = pending("a", priority=asked)
    queues.push(request)
    assert request.priority == level


@in_loop
async def test_priority_queue_policy_overrides_the_default_per_level() -> None:
    text = (
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "default_queue_policy { max_queue_size: 5 } "
        "priority_queue_policy { key: 1 value: { max_queue_size: 1 } } }"
    )
    queues = PriorityQueues(config(text))
    queues.push(pending("a", priority=1))
    with pytest.raises(UnavailableError, match="Exceeds maximum queue size"):
        queues.push(pending("b", priority=1))
    for name in "cde":
        queues.push(pending(name, priority=2))


@in_loop
async def test_a_failing_dispatcher_fails_queued_requests_and_keeps_serving() -> None:
    executor = FakeExecutor()
    batcher = DynamicBatcher(config("dynamic_batching {}"), executor)
    broken = True
    real_form = batcher._form_batch

    def form_once_broken() -> list[Pending]:
        nonlocal broken
        if broken:
            broken = False
            raise RuntimeError("bug")
        return real_form()

    batcher._form_batch = form_once_broken  # type: ignore[method-assign]
    with pytest.raises(Exception, match="dynamic batcher failed: bug"):
        await batcher.submit(pending("a"))
    await batcher.submit(pending("b"))  # the dispatcher is still there
    assert executor.batches == [["b"]]
    await batcher.close()
