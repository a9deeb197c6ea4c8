"""The sequence batcher against a fake executor: slots, backlog, controls, states, errors."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.backends.base import ExecResult
from workbench.core import _deadline_timer
from workbench.core.request import InferRequest
from workbench.core.scheduler import Pending, Slot
from workbench.core.sequence_batcher import (
    BACKLOG_TIMEOUT,
    STOPPING,
    NullPending,
    SequenceBatcher,
)
from workbench.core.statistics import RequestTimes
from workbench.errors import (
    CancelledError,
    ConfigError,
    InvalidArgumentError,
    UnavailableError,
)
from workbench.server.hosting import new_event_loop

T = TypeVar("T")

CONTROLS = """
control_input [
  { name: "START", control [ { kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] } ] },
  { name: "END", control [ { kind: CONTROL_SEQUENCE_END, fp32_false_true: [ 0, 1 ] } ] },
  { name: "READY", control [ { kind: CONTROL_SEQUENCE_READY, bool_false_true: [ false, true ] } ] },
  { name: "CORRID", control [ { kind: CONTROL_SEQUENCE_CORRID, data_type: %s } ] }
]
"""


def make_config(
    *, max_batch_size: int = 2, strategy: str = "direct { }", corrid: str = "TYPE_UINT64",
    extra: str = "", backend: str = "python",
) -> ModelConfig:  # fmt: skip
    text = f"""
        name: "acc" backend: "{backend}" max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
        sequence_batching {{ {strategy} {CONTROLS % corrid} {extra} }}
    """
    return text_format.Parse(text, ModelConfig())


@dataclass
class FakeSlot:
    index: int


@dataclass
class Execution:
    instance: int
    #: per request: its id and its inputs as lists (nulls have id "<null>")
    requests: list[dict[str, Any]]


def _respond(pending: Pending) -> ExecResult:
    """A model: OUTPUT = INPUT (+ INPUT_STATE, and OUTPUT_STATE = that sum, if it has state)."""
    inputs = pending.request.inputs
    value = inputs["INPUT"].array.copy()
    outputs = []
    if "INPUT_STATE" in inputs:
        value = value + inputs["INPUT_STATE"].array
        outputs.append(Tensor("OUTPUT_STATE", "INT32", value))
    return ExecResult(outputs=[Tensor("OUTPUT", "INT32", value), *outputs])


@dataclass
class FakeExecutor:
    """Instances as locks; records each execution; ``gate`` holds executions while clear."""

    instance_count: int = 1
    executions: list[Execution] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    respond: Callable[[Pending], ExecResult] = _respond
    locks: list[asyncio.Lock] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.locks = [asyncio.Lock() for _ in range(self.instance_count)]
        self.gate.set()

    async def acquire(self, index: int | None = None) -> Slot:
        assert index is not None, "sequence slots always name their instance"
        await self.locks[index].acquire()
        return FakeSlot(index)

    def try_acquire(self) -> Slot | None:
        return None  # sequence slots always wait for their own instance

    def release(self, slot: Slot) -> None:
        self.locks[slot.index].release()

    async def execute(self, slot: Slot, batch: list[Pending]) -> None:
        self.executions.append(Execution(slot.index, [_snapshot(p) for p in batch]))
        await self.gate.wait()
        for pending in batch:
            if not pending.future.done():
                pending.future.set_result(self.respond(pending))
        self.release(slot)


def _snapshot(pending: Pending) -> dict[str, Any]:
    seen: dict[str, Any] = {name: t.array.tolist() for name, t in pending.request.inputs.items()}
    seen["id"] = "<null>" if isinstance(pending, NullPending) else pending.request.id
    seen["dtypes"] = {name: t.datatype for name, t in pending.request.inputs.items()}
    seen["asked"] = pending.request.requested_outputs
    return seen


def pending(
    rid: str,
    value: int = 1,
    *,
    batched: bool = True,
    outputs: list[str] | None = None,
    **params: Any,
) -> Pending:
    shape = (1, 1) if batched else (1,)
    request = InferRequest(
        model_name="acc", id=rid, parameters=params, requested_outputs=outputs,
        inputs={"INPUT": Tensor("INPUT", "INT32", np.full(shape, value, np.int32))},
    )  # fmt: skip
    future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
    return Pending(request, 1, RequestTimes(), future)


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(scenario(), 20))


async def settle() -> None:
    """Let the batcher's tasks run until nothing moves."""
    for _ in range(20):
        await asyncio.sleep(0)


def output(result: ExecResult, name: str = "OUTPUT") -> Any:
    return {t.name: t.array.tolist() for t in result.outputs}[name]


# -- controls ----------------------------------------------------------------------------------


def test_controls_seen_by_the_model_batched() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(), executor)
        await batcher.submit(pending("a", 5, sequence_id=7, sequence_start=True))
        await batcher.submit(pending("b", 6, sequence_id=7))
        await batcher.submit(pending("c", 7, sequence_id=7, sequence_end=True))
        first, middle, last = (e.requests[0] for e in executor.executions)
        assert first["START"] == [[1]] and first["END"] == [[0.0]] and first["READY"] == [[True]]
        assert first["CORRID"] == [[7]] and first["INPUT"] == [[5]]
        assert first["dtypes"] == {
            "INPUT": "INT32", "START": "INT32", "END": "FP32", "READY": "BOOL", "CORRID": "UINT64",
        }  # fmt: skip
        assert (middle["START"], middle["END"], middle["READY"]) == ([[0]], [[0.0]], [[True]])
        assert (last["START"], last["END"], last["READY"]) == ([[0]], [[1.0]], [[True]])
        await batcher.close()

    run(scenario)


def test_controls_unbatched_and_string_ids() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        config = make_config(max_batch_size=0, corrid="TYPE_STRING")
        batcher = SequenceBatcher(config, executor)
        one = pending(
            "a", batched=False, sequence_id="seq-a", sequence_start=True, sequence_end=True
        )
        await batcher.submit(one)
        seen = executor.executions[0].requests[0]
        assert seen["START"] == [1] and seen["END"] == [1.0] and seen["READY"] == [True]
        assert seen["CORRID"] == [b"seq-a"] and seen["dtypes"]["CORRID"] == "BYTES"
        await batcher.close()

    run(scenario)


def test_narrow_corrid_type_gets_the_low_bits() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(corrid="TYPE_INT32"), executor)
        await batcher.submit(pending("a", sequence_id=2**32 + 5, sequence_start=True))
        assert executor.executions[0].requests[0]["CORRID"] == [[5]]
        assert executor.executions[0].requests[0]["dtypes"]["CORRID"] == "INT32"
        await batcher.close()

    run(scenario)


def test_bad_control_config_fails_construction() -> None:
    config = make_config()
    config.sequence_batching.control_input[0].control[0].ClearField("int32_false_true")
    with pytest.raises(ConfigError, match="must specify either 'int32_false_true'"):
        SequenceBatcher(config, FakeExecutor())
    config.sequence_batching.control_input[0].control[0].int32_false_true.extend([0, 1, 2])
    with pytest.raises(ConfigError, match="'int32_false_true' must have exactly 2 entries"):
        SequenceBatcher(config, FakeExecutor())


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [{}, {"sequence_id": 0}, {"sequence_id": ""}])
def test_missing_correlation_id(params: dict[str, Any]) -> None:
    async def scenario() -> None:
        batcher = SequenceBatcher(make_config(), FakeExecutor())
        with pytest.raises(InvalidArgumentError) as error:
            await batcher.submit(pending("a", sequence_start=True, **params))
        assert str(error.value) == (
            "inference request to model 'acc' must specify a non-zero or non-empty correlation ID"
        )
        await batcher.close()

    run(scenario)


def test_unknown_sequence_batch_size_and_type_errors() -> None:
    async def scenario() -> None:
        batcher = SequenceBatcher(make_config(), FakeExecutor())
        with pytest.raises(InvalidArgumentError) as error:
            await batcher.submit(pending("a", sequence_id=4242, sequence_end=True))
        assert str(error.value) == (
            "inference request for sequence 4242 to model 'acc' must specify the START flag on "
            "the first request of the sequence"
        )
        rows = pending("b", sequence_id=1, sequence_start=True)
        rows.batch_size = 2
        with pytest.raises(InvalidArgumentError) as error:
            await batcher.submit(rows)
        assert str(error.value) == (
            "inference request to model 'acc' must specify batch-size 1 due to requirements of "
            "sequence batcher"
        )
        with pytest.raises(InvalidArgumentError) as error:
            await batcher.submit(pending("c", sequence_id="beta", sequence_start=True))
        assert str(error.value) == (
            "[request id: c] sequence batching control 'CORRID' data-type is 'BYTES', but model "
            "'acc' expects 'UINT64'"
        )
        await batcher.close()

    run(scenario)


def test_end_forgets_the_id_and_start_restarts() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(), executor)
        await batcher.submit(pending("a", sequence_id=3, sequence_start=True, sequence_end=True))
        with pytest.raises(InvalidArgumentError, match="sequence 3 to model 'acc' must specify"):
            await batcher.submit(pending("b", sequence_id=3))
        await batcher.submit(pending("c", sequence_id=3, sequence_start=True))
        await batcher.close()

    run(scenario)


def test_start_on_an_active_sequence_continues_it(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(), executor)
        await batcher.submit(pending("a", sequence_id=9, sequence_start=True))
        with caplog.at_level(logging.WARNING):
            await batcher.submit(pending("b", sequence_id=9, sequence_start=True))
        await batcher.submit(pending("c", sequence_id=9, sequence_end=True))
        assert [e.requests[0]["START"] for e in executor.executions] == [[[1]], [[1]], [[0]]]
        assert "sequence 9 for model 'acc' has a conflict" in caplog.text
        await batcher.close()

    run(scenario)


# -- slots, backlog, ordering ------------------------------------------------------------------


def test_sequences_share_an_execution_with_null_padding() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(), executor)
        executor.gate.clear()
        a1 = asyncio.ensure_future(
            batcher.submit(pending("a1", 10, sequence_id=1, sequence_start=True))
        )
        await settle()  # a1 runs alone; b1 and a2 queue behind it
        b1 = asyncio.ensure_future(
            batcher.submit(pending("b1", 20, sequence_id=2, sequence_start=True))
        )
        a2 = asyncio.ensure_future(batcher.submit(pending("a2", 11, sequence_id=1)))
        await settle()
        executor.gate.set()
        await asyncio.gather(a1, b1, a2)
        await batcher.submit(pending("b2", 21, sequence_id=2))  # slot 0 has nothing: a null
        ids = [[r["id"] for r in e.requests] for e in executor.executions]
        assert ids == [["a1"], ["a2", "b1"], ["<null>", "b2"]]
        null = executor.executions[2].requests[0]
        assert (null["START"], null["END"], null["READY"]) == ([[0]], [[0.0]], [[False]])
        assert null["CORRID"] == [[0]] and null["INPUT"] == [[0]] and null["asked"] == []
        await batcher.close()

    run(scenario)


def test_backlog_waits_for_a_free_slot() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(max_batch_size=1), executor)
        await batcher.submit(pending("a1", sequence_id=1, sequence_start=True))
        b1 = asyncio.ensure_future(
            batcher.submit(pending("b1", sequence_id=2, sequence_start=True))
        )
        b2 = asyncio.ensure_future(batcher.submit(pending("b2", sequence_id=2, sequence_end=True)))
        await settle()
        assert not b1.done() and len(executor.executions) == 1
        await batcher.submit(pending("a2", sequence_id=1, sequence_end=True))
        await asyncio.gather(b1, b2)
        assert [e.requests[0]["id"] for e in executor.executions] == ["a1", "a2", "b1", "b2"]
        await batcher.close()

    run(scenario)


def test_lowest_slot_first_over_instances() -> None:
    async def scenario() -> None:
        executor = FakeExecutor(instance_count=2)
        batcher = SequenceBatcher(make_config(), executor)
        for key in (1, 2, 3):
            await batcher.submit(pending(f"s{key}", sequence_id=key, sequence_start=True))
        await batcher.submit(pending("s3b", sequence_id=3))
        where = [(e.instance, [r["id"] for r in e.requests]) for e in executor.executions]
        # 1 -> instance 0 slot 0, 2 -> instance 1 slot 0, 3 -> instance 0 slot 1 (null below).
        assert where == [(0, ["s1"]), (1, ["s2"]), (0, ["<null>", "s3"]), (0, ["<null>", "s3b"])]
        await batcher.close()

    run(scenario)


def test_requests_of_a_sequence_run_one_at_a_time_in_order() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(), executor)
        executor.gate.clear()
        tasks = [
            asyncio.ensure_future(
                batcher.submit(pending(f"r{i}", i, sequence_id=5, sequence_start=i == 0))
            )
            for i in range(4)
        ]
        await settle()
        assert len(executor.executions) == 1
        executor.gate.set()
        results = await asyncio.gather(*tasks)
        assert [output(r) for r in results] == [[[0]], [[1]], [[2]], [[3]]]
        assert [[r["id"] for r in e.requests] for e in executor.executions] == [
            ["r0"], ["r1"], ["r2"], ["r3"],
        ]  # fmt: skip
        await batcher.close()

    run(scenario)


DIRECT_UTILIZATION = "direct { max_queue_delay_microseconds: %d minimum_slot_utilization: 1.0 }"


def test_direct_with_half_the_slots_busy_waits_for_the_delay() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(strategy=DIRECT_UTILIZATION % 300_000), executor)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await batcher.submit(pending("a1", sequence_id=1, sequence_start=True))
        assert loop.time() - started >= 0.29  # a lower bound: a slow machine only adds to it
        await batcher.close()

    run(scenario)


def test_direct_with_every_slot_busy_runs_at_once() -> None:
    # The delay is an hour, which no run lasts: the batch leaves (within run's 20 s guard)
    # only if it did not wait for it.
    async def scenario() -> None:
        executor = FakeExecutor()
        hour_us = 3600 * 1_000_000
        batcher = SequenceBatcher(make_config(strategy=DIRECT_UTILIZATION % hour_us), executor)
        await asyncio.gather(
            batcher.submit(pending("a1", sequence_id=1, sequence_start=True)),
            batcher.submit(pending("b1", sequence_id=2, sequence_start=True)),
        )
        both = [
            batcher.submit(pending("a2", sequence_id=1)),
            batcher.submit(pending("b2", sequence_id=2)),
        ]
        await asyncio.gather(*both)
        assert [[r["id"] for r in e.requests] for e in executor.executions] == [
            ["a1", "b1"], ["a2", "b2"],
        ]  # fmt: skip
        await batcher.close()

    run(scenario)


def test_idle_sequence_is_released() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        extra = "max_sequence_idle_microseconds: 500000"
        batcher = SequenceBatcher(make_config(max_batch_size=1, extra=extra), executor)
        await batcher.submit(pending("a1", sequence_id=1, sequence_start=True))
        waiting = asyncio.ensure_future(
            batcher.submit(pending("b1", sequence_id=2, sequence_start=True))
        )
        await settle()  # loop turns, not a sleep: far less than the idle time passes
        assert not waiting.done()
        await asyncio.wait_for(waiting, 10)  # sequence 1 idled out after 500 ms
        with pytest.raises(InvalidArgumentError, match="sequence 1 to model 'acc' must specify"):
            await batcher.submit(pending("a2", sequence_id=1))
        await batcher.close()

    run(scenario)


def test_backlogged_sequence_times_out_with_its_deadline() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(max_batch_size=1), executor)
        await batcher.submit(pending("a1", sequence_id=1, sequence_start=True))
        late = pending("b1", sequence_id=2, sequence_start=True)
        late.deadline_ns = time.monotonic_ns() + 30_000_000
        with pytest.raises(UnavailableError, match=f"^{BACKLOG_TIMEOUT}$"):
            await batcher.submit(late)
        with pytest.raises(InvalidArgumentError, match="sequence 2 to model 'acc' must specify"):
            await batcher.submit(pending("b2", sequence_id=2))
        await batcher.close()

    run(scenario)


def test_cancelled_request_cancels_its_sequence() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(), executor)
        executor.gate.clear()
        first = asyncio.ensure_future(
            batcher.submit(pending("r0", sequence_id=5, sequence_start=True))
        )
        await settle()
        second = asyncio.ensure_future(batcher.submit(pending("r1", sequence_id=5)))
        third = asyncio.ensure_future(batcher.submit(pending("r2", sequence_id=5)))
        await settle()
        second.cancel()
        executor.gate.set()
        await first
        with pytest.raises(CancelledError, match="sequence 5 to model 'acc' was cancelled"):
            await third
        with pytest.raises(InvalidArgumentError, match="must specify the START flag"):
            await batcher.submit(pending("r3", sequence_id=5))
        assert [[r["id"] for r in e.requests] for e in executor.executions] == [["r0"]]
        await batcher.close()

    run(scenario)


def test_close_fails_queued_requests_and_refuses_new_ones() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(), executor)
        executor.gate.clear()
        running = asyncio.ensure_future(
            batcher.submit(pending("r0", sequence_id=5, sequence_start=True))
        )
        await settle()
        queued = asyncio.ensure_future(batcher.submit(pending("r1", sequence_id=5)))
        backlog = [
            asyncio.ensure_future(
                batcher.submit(pending(f"s{k}", sequence_id=k, sequence_start=True))
            )
            for k in (6, 7)
        ]
        await settle()
        closing = asyncio.ensure_future(batcher.close())
        await settle()
        executor.gate.set()
        await closing
        assert output(await running) == [[1]]  # the execution in flight completes
        for task in (queued, *backlog):
            with pytest.raises(UnavailableError, match=f"^{STOPPING}$"):
                await task
        with pytest.raises(UnavailableError, match=STOPPING):
            await batcher.submit(pending("r2", sequence_id=8, sequence_start=True))

    run(scenario)


# -- oldest ------------------------------------------------------------------------------------


OLDEST = (
    "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] "
    "max_queue_delay_microseconds: %d }"
)


def test_oldest_batches_sequences_one_request_each() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        config = make_config(max_batch_size=4, strategy=OLDEST % 10_000_000)
        batcher = SequenceBatcher(config, executor)
        a1 = asyncio.ensure_future(
            batcher.submit(pending("a1", 1, sequence_id=1, sequence_start=True))
        )
        a2 = asyncio.ensure_future(batcher.submit(pending("a2", 2, sequence_id=1)))
        b1 = asyncio.ensure_future(
            batcher.submit(pending("b1", 3, sequence_id=2, sequence_start=True))
        )
        await asyncio.gather(a1, b1)  # the preferred size 2 went at once
        assert [r["id"] for r in executor.executions[0].requests] == ["a1", "b1"]
        assert not a2.done()  # alone: waits for the (long) queue delay
        c1 = asyncio.ensure_future(
            batcher.submit(pending("c1", 4, sequence_id=3, sequence_start=True))
        )
        await asyncio.gather(a2, c1)
        assert [r["id"] for r in executor.executions[1].requests] == ["a2", "c1"]
        assert "CORRID" in executor.executions[1].requests[0]
        await batcher.close()

    run(scenario)


def test_oldest_queue_delay_releases_a_small_batch() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(max_batch_size=4, strategy=OLDEST % 30_000), executor)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await batcher.submit(pending("a1", sequence_id=1, sequence_start=True))
        assert loop.time() - started >= 0.025
        assert len(executor.executions) == 1 and len(executor.executions[0].requests) == 1
        await batcher.close()

    run(scenario)


@pytest.mark.skipif(_deadline_timer._TIMERFD is None, reason="needs Linux timerfd")
def test_oldest_sub_millisecond_delay_is_kept_and_slept_through() -> None:
    count = 60

    async def sequences(delay_us: int) -> float:
        """CPU seconds of ``count`` one-request sequences, each alone for its delay."""
        executor = FakeExecutor()
        config = make_config(max_batch_size=4, strategy=OLDEST % delay_us)
        batcher = SequenceBatcher(config, executor)
        cpu = time.process_time()
        for number in range(1, count + 1):
            begin = time.monotonic_ns()
            start_end = {"sequence_start": True, "sequence_end": True}
            await batcher.submit(pending(f"r{number}", sequence_id=number, **start_end))
            assert (time.monotonic_ns() - begin) / 1000 >= delay_us
        cpu = time.process_time() - cpu
        assert [len(e.requests) for e in executor.executions] == [1] * count
        await batcher.close()
        return cpu

    async def scenario() -> None:
        cpu_0 = await sequences(0)
        cpu = await sequences(900)
        # The delays add at least count x 900 us of wall time (asserted above), not CPU:
        # yielding to the loop until them kept a CPU busy. CPU time against the delays' known
        # sum, not against a second wall-time measurement that a loaded machine stretches.
        # The longest sub-millisecond delay keeps the timers' own cost (an arm and a wake-up
        # per sequence, inflated on a loaded machine) far below the half that a spin would add.
        assert cpu - cpu_0 < count * 900e-6 / 2

    loop = new_event_loop()  # the server's: uvloop's timers round 300 us down to nothing
    try:
        loop.run_until_complete(asyncio.wait_for(scenario(), 20))
    finally:
        loop.close()


def test_oldest_candidates_beyond_the_limit_wait() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        strategy = "oldest { max_candidate_sequences: 1 }"
        batcher = SequenceBatcher(make_config(max_batch_size=4, strategy=strategy), executor)
        await batcher.submit(pending("a1", sequence_id=1, sequence_start=True))
        b1 = asyncio.ensure_future(
            batcher.submit(pending("b1", sequence_id=2, sequence_start=True))
        )
        await settle()
        assert not b1.done()
        await batcher.submit(pending("a2", sequence_id=1, sequence_end=True))
        await b1
        await batcher.close()

    run(scenario)


# -- implicit state ----------------------------------------------------------------------------

STATE = """
state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
          %s } ]
"""
ZERO = 'initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }'


def test_implicit_state_is_carried_and_hidden() -> None:
    async def scenario() -> None:
        executor = FakeExecutor()
        config = make_config(extra=STATE % ZERO, backend="onnxruntime")
        batcher = SequenceBatcher(config, executor)
        sums = []
        for i, value in enumerate((5, 6, 7)):
            request = pending(
                f"r{i}", value, sequence_id=1, sequence_start=i == 0, outputs=["OUTPUT"]
            )
            result = await batcher.submit(request)
            assert [t.name for t in result.outputs] == ["OUTPUT"]
            sums.append(output(result))
        assert sums == [[[5]], [[11]], [[18]]]
        assert executor.executions[0].requests[0]["asked"] == ["OUTPUT", "OUTPUT_STATE"]
        restart = await batcher.submit(pending("s", 1, sequence_id=1, sequence_start=True))
        assert output(restart) == [[1]] and [t.name for t in restart.outputs] == ["OUTPUT"]
        await batcher.close()

    run(scenario)


def test_python_backend_state_stays_initial() -> None:
    # Triton 2.51's python backend never stores the state output: the input stays initial.
    async def scenario() -> None:
        executor = FakeExecutor()
        batcher = SequenceBatcher(make_config(extra=STATE % ""), executor)
        values = []
        for i, value in enumerate((5, 6)):
            result = await batcher.submit(
                pending(f"r{i}", value, sequence_id=1, sequence_start=i == 0)
            )
            values.append(output(result))
            assert [t.name for t in result.outputs] == ["OUTPUT"]
        assert values == [[[5]], [[6]]]
        assert [e.requests[0]["INPUT_STATE"] for e in executor.executions] == [[[0]], [[0]]]
        await batcher.close()

    run(scenario)


def test_initial_state_from_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "init.bin").write_bytes(np.array([40], np.int32).tobytes())
    from_file = (
        'initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "init.bin" name: "f" }'
    )

    async def scenario() -> None:
        executor = FakeExecutor()
        config = make_config(extra=STATE % from_file, backend="pytorch")
        batcher = SequenceBatcher(config, executor, model_path=tmp_path)
        first = await batcher.submit(pending("r0", 2, sequence_id=1, sequence_start=True))
        second = await batcher.submit(pending("r1", 3, sequence_id=1))
        assert (output(first), output(second)) == ([[42]], [[45]])
        await batcher.close()

    run(scenario)


@pytest.mark.parametrize(
    ("initial", "message"),
    [
        ('initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "z" }',
         "The data type used for 'initial_state' field of state 'INPUT_STATE' does not match"),
        ("initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true }",
         "Field 'name' must be set when using initial_state for state input 'INPUT_STATE'."),
        ('initial_state { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true name: "z" }',
         "'initial_state' dim for input name 'INPUT_STATE' doesn't match 'state' dim "
         "description. 2 != 1"),
        ('initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "none" name: "z" }',
         "initial_state 'z' reads 'none' but the model's folder is unknown"),
    ],
)  # fmt: skip
def test_bad_initial_state_fails_construction(initial: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        SequenceBatcher(make_config(extra=STATE % initial), FakeExecutor())
    assert message in str(error.value)


def test_short_initial_state_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "short").write_bytes(b"\x01\x02")
    initial = 'initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "short" name: "f" }'
    with pytest.raises(ConfigError) as error:
        SequenceBatcher(make_config(extra=STATE % initial), FakeExecutor(), model_path=tmp_path)
    assert str(error.value) == (
        "initial_state setting expects 4 bytes, but the data provided from shortonly has 2 bytes."
    )
