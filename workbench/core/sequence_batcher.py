"""Triton's sequence batcher: stateful sequences bound to batch slots on model instances.

What Triton 2.51 does (``core/src/sequence_batch_scheduler/``; observed with real tritonserver,
see ``docs/triton-scheduling-facts.md``), and so what this does:

- A request names its sequence with the ``sequence_id`` parameter (uint64 or string) and marks
  its first and last request with ``sequence_start``/``sequence_end``. A new sequence takes the
  free slot with the lowest index (``max_batch_size`` slots per instance, or
  ``oldest.max_candidate_sequences``); when none is free it waits in the backlog, in arrival
  order, until a sequence ends or idles out.
- ``direct``: one execution per instance at a time, holding the next request of every slot from
  0 up to the highest busy one; an empty slot below a busy one gets a *null* request (READY
  false, CORRID 0, no id), which the model sees and whose response is dropped.
- ``oldest``: the next request of each candidate sequence joins a dynamic batch (preferred
  sizes, ``max_queue_delay_microseconds``); a sequence has one request in flight at a time.
- A slotted sequence without a request for ``max_sequence_idle_microseconds`` (default 1 s)
  loses its slot; its next request without START is refused.
- A START for a sequence still in progress continues it (the model sees START again); a
  cancelled queued request cancels its whole sequence.
- Implicit state (``sequence_batching.state``): the state input starts from ``initial_state``
  and then carries the previous state output, which the client sees only if it is a declared
  output it asked for. Triton 2.51's python backend never stores state outputs: for python
  models the state input stays at its initial value, as there.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ExecResult
from workbench.core._sequence_controls import SequenceControls, SequenceKey, state_specs
from workbench.core._sequence_slots import (
    Job,
    Lane,
    NullPending,
    QueuedRequest,
    TrackedSequence,
    batch_delay,
    null_request,
    wait_event,
)
from workbench.core.queue_policy import QueueTimeoutError
from workbench.core.scheduler import Executor, Pending
from workbench.errors import CancelledError, InternalError, InvalidArgumentError, UnavailableError

__all__ = ["BACKLOG_TIMEOUT", "STOPPING", "NullPending", "SequenceBatcher"]

log = logging.getLogger(__name__)

STOPPING = "Server is stopping, scheduler for model has stopped accepting new inference requests"
BACKLOG_TIMEOUT = "timeout of the corresponding sequence has been expired"
_DEFAULT_IDLE_US = 1_000_000


class SequenceBatcher:
    """Triton's ``sequence_batching`` scheduler, strategies ``direct`` (default) and ``oldest``.

    ``model_path`` (the model's folder) is needed only for ``initial_state { data_file }``.
    """

    def __init__(
        self, config: ModelConfig, executor: Executor, model_path: Path | None = None
    ) -> None:
        batching = config.sequence_batching
        self.model = config.name
        self.executor = executor
        self._controls = SequenceControls(config)
        self._states = state_specs(config, model_path)
        # Triton 2.51's python backend feeds the state input but never stores the state output.
        self._carry = bool(self._states) and config.backend != "python"
        declared = {o.name for o in config.output}
        self._hidden_states = {s.output_name for s in self._states} - declared
        self._idle_ns = (batching.max_sequence_idle_microseconds or _DEFAULT_IDLE_US) * 1000
        self._oldest = batching.HasField("oldest")
        max_batch = max(1, config.max_batch_size)
        slots = max_batch
        self._target = max_batch
        self._utilization = 0.0
        if self._oldest:
            slots = batching.oldest.max_candidate_sequences or max_batch
            preferred = [s for s in batching.oldest.preferred_batch_size if s <= max_batch]
            self._target = max(preferred, default=max_batch)
            self._delay_ns = batching.oldest.max_queue_delay_microseconds * 1000
        else:
            self._utilization = batching.direct.minimum_slot_utilization
            self._delay_ns = batching.direct.max_queue_delay_microseconds * 1000
        count = executor.instance_count
        self._lanes = [Lane(index, [None] * slots) for index in range(count)]
        # Free (slot, instance) pairs: the lowest slot index first, over all instances.
        self._free = [(slot, index) for slot in range(slots) for index in range(count)]
        heapq.heapify(self._free)
        self._active: dict[SequenceKey, TrackedSequence] = {}
        self._backlog: deque[TrackedSequence] = deque()
        self._executions: set[asyncio.Future[None]] = set()
        self._reaper_wake = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False

    # -- requests --------------------------------------------------------------------------------
    async def submit(self, pending: Pending) -> ExecResult:
        request = self._enqueue(pending)
        result = await pending.future
        return self._client_view(result, request)

    def _enqueue(self, pending: Pending) -> QueuedRequest:
        key = self._controls.sequence_key(pending.request, pending.batch_size)
        if self._closed:
            raise UnavailableError(STOPPING)
        self._start_tasks()
        params = pending.request.parameters
        request = QueuedRequest(
            pending,
            start=bool(params.get("sequence_start")),
            end=bool(params.get("sequence_end")),
            arrival_ns=time.monotonic_ns(),
            asked=pending.request.requested_outputs,
        )
        sequence = self._active.get(key)
        if sequence is None and not request.start:
            raise InvalidArgumentError(
                f"inference request for sequence {key} to model '{self.model}' must specify "
                "the START flag on the first request of the sequence"
            )
        if sequence is not None and request.start:
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end "
                "before this sequence start. Previous sequence will be terminated early.",
                key,
                self.model,
            )
        new = sequence is None
        if sequence is None:
            sequence = self._active[key] = TrackedSequence(key)
        sequence.queue.append(request)
        sequence.last_arrival_ns = request.arrival_ns
        if request.end:
            # Its requests still run; the id is free for a new sequence from now on.
            sequence.open = False
            del self._active[key]
        if pending.deadline_ns and sequence.slot < 0:
            self._reaper_wake.set()
        if new:
            self._place(sequence)
        else:
            self._notify(sequence)
        return request

    def _client_view(self, result: ExecResult, request: QueuedRequest) -> ExecResult:
        """The result without the state outputs the client cannot see (a new object)."""
        if not self._states:
            return result
        hidden = set(self._hidden_states)
        if request.asked is not None:
            hidden |= {s.output_name for s in self._states if s.output_name not in request.asked}
        if not any(t.name in hidden for t in result.outputs):
            return result
        outputs = [t for t in result.outputs if t.name not in hidden]
        return ExecResult(outputs=outputs, error=result.error, parameters=result.parameters)

    # -- slots -----------------------------------------------------------------------------------
    def _place(self, sequence: TrackedSequence) -> None:
        if self._free:
            slot, lane = heapq.heappop(self._free)
            self._assign(sequence, lane, slot)
        else:
            self._backlog.append(sequence)
            self._reaper_wake.set()

    def _assign(self, sequence: TrackedSequence, lane: int, slot: int) -> None:
        self._lanes[lane].slots[slot] = sequence
        sequence.lane, sequence.slot = lane, slot
        self._reaper_wake.set()
        self._notify(sequence)

    def _release(self, sequence: TrackedSequence) -> None:
        """Free the sequence's slot for the oldest backlogged sequence (or a new one)."""
        if sequence.slot < 0:
            return
        lane, slot = sequence.lane, sequence.slot
        self._lanes[lane].slots[slot] = None
        sequence.lane = sequence.slot = -1
        while self._backlog:
            waiting = self._backlog.popleft()
            if any(r.pending.future.cancelled() for r in waiting.queue):
                self._cancel(waiting)
                continue
            self._assign(waiting, lane, slot)
            return
        heapq.heappush(self._free, (slot, lane))

    def _notify(self, sequence: TrackedSequence) -> None:
        """A slotted sequence may have a request to run: tell its lane."""
        if sequence.slot < 0:
            return
        lane = self._lanes[sequence.lane]
        if self._oldest:
            if sequence.in_flight or not sequence.queue or sequence.ready_ns:
                return
            sequence.ready_ns = time.monotonic_ns()
            lane.ready.append(sequence)
        lane.wake.set()

    def _cancel(self, sequence: TrackedSequence) -> None:
        """Triton ends a sequence whose queued request was cancelled, failing the rest."""
        for request in sequence.queue:
            request.pending.fail(
                CancelledError(f"sequence {sequence.key} to model '{self.model}' was cancelled")
            )
        sequence.queue.clear()
        sequence.open = False
        if self._active.get(sequence.key) is sequence:
            del self._active[sequence.key]
        if not sequence.in_flight:
            self._release(sequence)

    # -- batches ---------------------------------------------------------------------------------
    async def _run_lane(self, lane: Lane) -> None:
        """Run one batch at a time on the lane's instance (Triton's per-instance batcher)."""
        while not self._closed:
            lane.wake.clear()
            delay = self._delay(lane)
            if delay is None or delay > 0:
                if delay is not None:  # a late or spare wake-up only re-checks the delay
                    lane.timer.arm(time.monotonic_ns() + int(delay * 1e9))
                await lane.wake.wait()
                continue
            slot = await self.executor.acquire(lane.index)
            jobs = self._oldest_batch(lane) if self._oldest else self._direct_batch(lane)
            if not jobs:
                self.executor.release(slot)
                continue
            execution = asyncio.ensure_future(
                self.executor.execute(slot, [j.pending for j in jobs])
            )
            self._executions.add(execution)
            execution.add_done_callback(self._executions.discard)
            # Registered before the wait below, so it runs before this loop resumes.
            execution.add_done_callback(functools.partial(self._finish, jobs))
            # ``wait`` (not ``await``): cancelling this loop on close must not cancel the model.
            await asyncio.wait({execution})

    def _delay(self, lane: Lane) -> float | None:
        """None: nothing to run; 0: run a batch now; else seconds to wait for a fuller one."""
        if self._oldest:
            if not lane.ready:
                return None
            full = len(lane.ready) >= self._target
            return batch_delay(lane.ready[0].ready_ns, full, self._delay_ns)
        fronts = lane.fronts()
        if not fronts:
            return None
        # Triton's direct strategy waits only when both knobs are set.
        full = not self._utilization or len(fronts) / len(lane.slots) >= self._utilization
        since = min(f.arrival_ns for f in fronts)
        return batch_delay(since, full, self._delay_ns)

    def _direct_batch(self, lane: Lane) -> list[Job]:
        """The next request of every slot up to the highest busy one; null requests between."""
        for sequence in list(lane.slots):
            if sequence is not None and sequence.front_cancelled():
                self._cancel(sequence)
        busy = [i for i, s in enumerate(lane.slots) if s is not None and s.queue]
        if not busy:
            return []
        first = lane.slots[busy[0]]
        assert first is not None
        # Snapshot before dispatching adds controls: nulls copy the client's inputs only.
        template = dict(first.queue[0].pending.request.inputs)
        states = [(s, first.state.get(s.input_name, s.initial)) for s in self._states]
        jobs = []
        for index in range(busy[-1] + 1):
            sequence = lane.slots[index]
            if sequence is None or not sequence.queue:
                null = null_request(self.model, self._controls, template, states)
                jobs.append(Job(null, None))
            else:
                jobs.append(self._dispatch(sequence))
        return jobs

    def _oldest_batch(self, lane: Lane) -> list[Job]:
        """Up to the preferred size (or all, after the delay) of the ready sequences."""
        jobs: list[Job] = []
        while lane.ready and len(jobs) < self._target:
            sequence = lane.ready.popleft()
            sequence.ready_ns = 0
            if not sequence.queue or sequence.slot < 0 or sequence.in_flight:
                continue  # cancelled or closed since it became ready
            if sequence.front_cancelled():
                self._cancel(sequence)
                continue
            jobs.append(self._dispatch(sequence))
        return jobs

    def _dispatch(self, sequence: TrackedSequence) -> Job:
        """Take the sequence's next request into a batch, with its controls and state."""
        request = sequence.queue.popleft()
        sequence.in_flight = True
        infer = request.pending.request
        if request.start:
            sequence.state = {}
        for tensor in self._controls.tensors(request.start, request.end, sequence.key):
            infer.inputs[tensor.name] = tensor
        for spec in self._states:
            value = sequence.state.get(spec.input_name, spec.initial)
            infer.inputs[spec.input_name] = spec.tensor(np.array(value, copy=True))
        if self._carry and infer.requested_outputs is not None:
            asked = infer.requested_outputs
            missing = [s.output_name for s in self._states if s.output_name not in asked]
            infer.requested_outputs = [*infer.requested_outputs, *missing]
        if not sequence.open and not sequence.queue:
            # Its END (or last request after idling out) is taken: the slot can serve another.
            self._release(sequence)
        return Job(request.pending, sequence)

    def _finish(self, jobs: list[Job], _: object = None) -> None:
        """After an execution: keep the new states, let each sequence's next request go."""
        for job in jobs:
            sequence = job.sequence
            if sequence is None:
                continue
            sequence.in_flight = False
            if self._carry:
                self._keep_state(sequence, job.pending.future)
            if not sequence.open and not sequence.queue:
                self._release(sequence)
            else:
                self._notify(sequence)

    def _keep_state(self, sequence: TrackedSequence, future: asyncio.Future[ExecResult]) -> None:
        if not future.done() or future.cancelled() or future.exception() is not None:
            return
        outputs = {t.name: t.array for t in future.result().outputs}
        for spec in self._states:
            if spec.output_name in outputs:
                sequence.state[spec.input_name] = outputs[spec.output_name]

    # -- idle sequences, backlog timeouts ----------------------------------------------------------
    async def _run_reaper(self) -> None:
        while not self._closed:
            self._reaper_wake.clear()
            await wait_event(self._reaper_wake, self._reap())

    def _reap(self) -> float | None:
        """Release idle sequences, time out backlogged ones; seconds until the next check."""
        now = time.monotonic_ns()
        due = [self._idle_due(s, now) for s in list(self._active.values()) if s.slot >= 0]
        due += [self._backlog_due(s, now) for s in list(self._backlog)]
        upcoming = [d for d in due if d is not None]
        return (min(upcoming) - now) / 1e9 if upcoming else None

    def _idle_due(self, sequence: TrackedSequence, now: int) -> int | None:
        due = sequence.last_arrival_ns + self._idle_ns
        if due > now:
            return due
        log.debug("sequence %s of model '%s': max sequence idle exceeded", sequence.key, self.model)
        del self._active[sequence.key]
        sequence.open = False
        if not sequence.queue and not sequence.in_flight:
            self._release(sequence)
        return None

    def _backlog_due(self, sequence: TrackedSequence, now: int) -> int | None:
        deadlines = [r.pending.deadline_ns for r in sequence.queue if r.pending.deadline_ns]
        if not deadlines or min(deadlines) > now:
            return min(deadlines, default=None)
        self._backlog.remove(sequence)
        if self._active.get(sequence.key) is sequence:
            del self._active[sequence.key]
        for request in sequence.queue:
            request.pending.fail(QueueTimeoutError(BACKLOG_TIMEOUT))
        sequence.queue.clear()
        return None

    # -- lifecycle -------------------------------------------------------------------------------
    def _start_tasks(self) -> None:
        """Start the lanes and the reaper on the serving loop (at the first request)."""
        if self._reaper is not None:
            return
        self._reaper = asyncio.ensure_future(self._run_reaper())
        self._reaper.add_done_callback(self._crashed)
        for lane in self._lanes:
            lane.task = asyncio.ensure_future(self._run_lane(lane))
            lane.task.add_done_callback(self._crashed)

    def _crashed(self, task: asyncio.Task[None]) -> None:
        """A scheduling task died of a bug: fail everything rather than hang the clients."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("sequence batcher of model '%s' failed", self.model, exc_info=task.exception())
        message = f"sequence batcher of model '{self.model}' failed"
        self._fail_queued(lambda: InternalError(message))
        self._closed = True

    def _fail_queued(self, error: Callable[[], Exception]) -> None:
        sequences = [s for lane in self._lanes for s in lane.slots if s is not None]
        for sequence in [*sequences, *self._backlog]:
            for request in sequence.queue:
                request.pending.fail(error())
            sequence.queue.clear()
        for lane in self._lanes:
            lane.ready.clear()
        self._backlog.clear()
        self._active.clear()

    async def close(self) -> None:
        self._closed = True
        self._fail_queued(lambda: UnavailableError(STOPPING))
        tasks = [lane.task for lane in self._lanes if lane.task is not None]
        if self._reaper is not None:
            tasks.append(self._reaper)
        for task in tasks:
            task.cancel()
        # The executions still running finish and settle their requests.
        await asyncio.gather(*tasks, *self._executions, return_exceptions=True)
        for lane in self._lanes:
            lane.timer.close()
