"""The sequence batcher's bookkeeping: queued requests, sequences, per-instance lanes.

Plain records and small pure helpers; ``SequenceBatcher`` (``sequence_batcher.py``) owns the
decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from workbench._types import Tensor
from workbench.backends.base import ExecResult
from workbench.core._deadline_timer import DeadlineTimer
from workbench.core._sequence_controls import SequenceControls, SequenceKey, StateSpec
from workbench.core.request import InferRequest
from workbench.core.scheduler import Pending
from workbench.core.statistics import RequestTimes


@dataclass(slots=True, eq=False)
class NullPending(Pending):
    """Padding for an empty slot below a busy one (``direct``): executed, never answered.

    Triton sends these to the model too (READY false, CORRID 0, flags 0, no id, no requested
    outputs) and counts them in the execution's batch size, but not as inferences.
    """


@dataclass(slots=True, eq=False)
class QueuedRequest:
    pending: Pending
    start: bool
    end: bool
    arrival_ns: int
    #: the outputs the client asked for (state outputs may be added for the model)
    asked: list[str] | None


@dataclass(slots=True, eq=False)
class TrackedSequence:
    """One sequence: its queued requests, where it runs, its carried implicit state."""

    key: SequenceKey
    queue: deque[QueuedRequest] = field(default_factory=deque)
    last_arrival_ns: int = 0
    #: instance and slot while the sequence holds a slot; -1 while in the backlog
    lane: int = -1
    slot: int = -1
    #: takes more requests: False once its END is queued, or it idled out or was cancelled
    open: bool = True
    in_flight: bool = False
    #: ``oldest``: since when its next request waits in the lane's ready queue (0: it does not)
    ready_ns: int = 0
    #: implicit state carried from the previous output, by state input name
    state: dict[str, np.ndarray] = field(default_factory=dict)

    def front_cancelled(self) -> bool:
        return bool(self.queue) and self.queue[0].pending.future.cancelled()


@dataclass(slots=True, eq=False)
class Lane:
    """One instance: its sequence slots and the task that batches them."""

    index: int
    slots: list[TrackedSequence | None]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: ``oldest``: sequences whose next request can join the next batch, longest waiting first
    ready: deque[TrackedSequence] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    #: sets ``wake`` at the end of a queue delay (sub-millisecond delays stay on time)
    timer: DeadlineTimer = field(init=False)

    def __post_init__(self) -> None:
        self.timer = DeadlineTimer(self.wake.set)

    def fronts(self) -> list[QueuedRequest]:
        """The next request of each slot that has one."""
        return [s.queue[0] for s in self.slots if s is not None and s.queue]


@dataclass(slots=True, eq=False)
class Job:
    """One request of a batch; ``sequence`` is None for a null request."""

    pending: Pending
    sequence: TrackedSequence | None


def batch_delay(since_ns: int, full: bool, delay_ns: int) -> float:
    """0 to run a batch now, else the seconds left of a delay that started at ``since_ns``."""
    if full or not delay_ns:
        return 0.0
    return max(0.0, (delay_ns - (time.monotonic_ns() - since_ns)) / 1e9)


def null_request(
    model: str,
    controls: SequenceControls,
    template: dict[str, Tensor],
    states: list[tuple[StateSpec, np.ndarray]],
) -> NullPending:
    """A null request shaped like ``template`` (a real request's inputs): zeros, not ready.

    Triton leaves a null request's inputs uninitialised; zeros are as good and repeatable.
    """
    inputs = {name: Tensor(name, t.datatype, zeros_like(t.array)) for name, t in template.items()}
    for tensor in controls.tensors(False, False, None):
        inputs[tensor.name] = tensor
    for spec, value in states:
        inputs[spec.input_name] = spec.tensor(zeros_like(value))
    request = InferRequest(model_name=model, inputs=inputs, requested_outputs=[])
    future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
    future.add_done_callback(_consume)
    return NullPending(request, 1, RequestTimes(), future)


def zeros_like(array: np.ndarray) -> np.ndarray:
    if array.dtype == object:
        return np.full(array.shape, b"", dtype=object)
    return np.zeros_like(array)


def _consume(future: asyncio.Future[ExecResult]) -> None:
    """Nobody awaits a null request: mark its outcome as seen."""
    if not future.cancelled():
        future.exception()


async def wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Until ``event`` is set, or ``timeout`` seconds pass (None: no limit)."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
