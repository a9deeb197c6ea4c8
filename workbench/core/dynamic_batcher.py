"""Triton's dynamic batcher: requests wait in priority queues and leave in batches.

It runs on loop callbacks, without a task of its own: each arrival, the end of a queue delay
(a microsecond timer) and the end of an execution (the instance it frees is handed over in
that call, ``InstancePool.when_free``) look at the queues. An instance is reserved first and
only then a batch formed, so requests that arrive while every instance is busy are batched
together (this is where batching comes from under load, even with
``max_queue_delay_microseconds: 0``); a request that finds an instance free leaves at once,
as Triton's batcher thread, woken by each arrival, sends it. A batch is
sent at once when it is full: it has the largest preferred size (``max_batch_size`` without
preferred sizes), or the next request would take it past that size or has other shapes. A
batch that has some preferred size is sent at once too. Otherwise the reserved instance waits
until the oldest request has waited ``max_queue_delay_microseconds`` and gets what is queued.
(Each rule was checked against tritonserver 2.51: docs/triton-scheduling-facts.md.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ExecResult
from workbench.core._clock import MONOTONIC, Clock
from workbench.core.queue_policy import PriorityQueues
from workbench.core.scheduler import Executor, Pending, Slot
from workbench.errors import InternalError, UnavailableError

log = logging.getLogger("workbench.core")


class DynamicBatcher:
    """The ``dynamic_batching`` scheduler of one model version.

    ``clock`` is the server's monotonic clock; tests pass one they move by hand.
    """

    def __init__(self, config: ModelConfig, executor: Executor, clock: Clock = MONOTONIC) -> None:
        settings = config.dynamic_batching
        self._executor = executor
        self._max_rows = max(config.max_batch_size, 1)
        self._delay_ns = settings.max_queue_delay_microseconds * 1000
        self._preferred = sorted({p for p in settings.preferred_batch_size if p <= self._max_rows})
        self._ragged = {i.name for i in config.input if i.allow_ragged_batch}
        self._batching = config.max_batch_size > 0
        self.queues = PriorityQueues(config)
        self._preserve = settings.preserve_ordering
        self._last_delivered: asyncio.Future[None] | None = None
        #: the instance reserved for the batch being formed (held through the queue delay)
        self._slot: Slot | None = None
        #: waiting for an instance while every one is busy: a callback registered with the
        #: executor (True), or a task awaiting one (under a rate limiter)
        self._waiting = False
        self._acquiring: asyncio.Task[None] | None = None
        self._now = clock.now_ns
        self._timer = clock.timer(self._pump)
        #: executions started, pruned of finished ones now and then (``close`` waits for them)
        self._running: list[asyncio.Future[Any]] = []
        self._closed = False

    # -- the request side ----------------------------------------------------------------------
    async def submit(self, pending: Pending) -> ExecResult:
        if self._closed:
            raise UnavailableError("model is being unloaded; request rejected")
        self.queues.push(pending)  # raises when the queue is full
        # At once, as Triton's batcher thread wakes on each arrival: a request that finds an
        # instance free leaves without waiting for the others read in this loop turn (which
        # would make batches larger than Triton's and leave a second instance idle), and with
        # a queue delay it at most starts the delay, later arrivals still joining its batch.
        self._pump()
        if not self._preserve:
            return await pending.future
        return await self._in_order(pending)

    async def _in_order(self, pending: Pending) -> ExecResult:
        """``preserve_ordering``: a response leaves only after those of earlier requests."""
        previous = self._last_delivered
        delivered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last_delivered = delivered
        try:
            await asyncio.wait([pending.future])
            if previous is not None:
                await asyncio.shield(previous)
            return pending.future.result()
        finally:
            delivered.set_result(None)

    # -- the dispatcher ------------------------------------------------------------------------
    def _pump(self) -> None:
        """Start every batch that can go now; a timer or the waiting task does the rest."""
        try:
            while self._start_one():
                pass
        except Exception as exc:  # a bug here must not leave requests waiting forever
            self._fail(exc)

    def _start_one(self) -> bool:
        """Start one batch if an instance is free and a batch is due; say whether it did."""
        if self._closed or self._waiting:
            return False
        slot = self._slot
        if slot is None:
            if not self.queues:
                return False
            slot = self._executor.try_acquire()
            if slot is None:
                self._wait_for_instance()
                return False
            self._slot = slot
        batch = self._form_batch()
        if not batch:
            return False
        self._slot = None
        self._track(self._executor.execute(slot, batch))
        return True

    def _track(self, execution: Awaitable[None]) -> None:
        """Remember a running execution (a done callback would cost a loop turn each)."""
        job = asyncio.ensure_future(execution)
        if len(self._running) >= 16:
            self._running = [j for j in self._running if not j.done()]
        self._running.append(job)

    def _wait_for_instance(self) -> None:
        """Every instance is busy: take the next one free as it is freed (``_take``), as
        Triton's batcher thread, woken when an instance is done, sends its next batch while
        the front end goes on reading. (A task awaiting the instance would send it only after
        every other callback of that loop turn, the instance idle meanwhile.)"""
        self._waiting = True
        if not self._executor.when_free(self._take):
            self._acquiring = asyncio.ensure_future(self._acquire())

    async def _acquire(self) -> None:
        """Where the pool cannot hand over (a rate limiter's resources, or an instance idle
        but held for another waiter): wait for an instance in a task."""
        try:
            slot = await self._executor.acquire()
        except Exception as exc:
            self._waiting = False
            self._fail(exc)
            return
        finally:
            self._acquiring = None
        self._take(slot)

    def _take(self, slot: Slot) -> None:
        """An instance for the waiting requests (in the call that freed it): send what is due."""
        self._waiting = False
        if self._closed:
            self._executor.release(slot)
            return
        self._slot = slot
        self._pump()

    def _form_batch(self) -> list[Pending]:
        """The batch to send now, taken from the queues; or none, with the timer armed for
        when that may change (the oldest request's delay ends, or a queue timeout)."""
        now = self._now()
        wake_at = self.queues.expire(now)
        candidates, send_now = self._candidates()
        if not candidates:  # what was queued timed out or was cancelled
            self._give_back()
            return []
        due = min(p.times.received for p in candidates) + self._delay_ns
        if send_now or now >= due:
            return self.queues.take(candidates)
        # A preferred size is sent at once, without waiting for a larger one.
        preferred = self._preferred_prefix(candidates)
        if preferred:
            return self.queues.take(preferred)
        self._timer.arm(due if wake_at is None else min(due, wake_at))
        return []

    def _give_back(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            self._executor.release(slot)

    def _fail(self, error: Exception) -> None:
        log.error("dynamic batcher failed; failing the queued requests", exc_info=error)
        self._give_back()
        self.queues.fail_all(InternalError(f"dynamic batcher failed: {error}"))

    def _candidates(self) -> tuple[list[Pending], bool]:
        """The requests the next batch can hold, in priority order, and whether to send now.

        Collection stops at the largest preferred size (``max_batch_size`` without one), at a
        request that would take the batch past it, or at one whose shapes differ. A first
        request larger than every preferred size goes alone.
        """
        chosen: list[Pending] = []
        rows = 0
        shapes: tuple[object, ...] | None = None  # the first request's, once a second comes
        plan: object | None = None  # the first request's decoding plan: the same shapes
        target = self._preferred[-1] if self._preferred else self._max_rows
        for pending in self.queues.in_order():
            if chosen:
                if rows + pending.batch_size > target:
                    return chosen, True
                if plan is None or pending.request.plan is not plan:
                    if shapes is None:
                        shapes = self._shape_key(chosen[0])
                    if self._shape_key(pending) != shapes:
                        return chosen, True
            else:
                plan = pending.request.plan
            chosen.append(pending)
            rows += pending.batch_size
            if rows >= target or not self._batching:
                return chosen, True
        return chosen, False

    def _shape_key(self, pending: Pending) -> tuple[object, ...]:
        """Shapes beyond the batch dimension of the inputs that must match to batch."""
        if not self._batching:
            return ()
        return tuple(
            (name, tensor.array.shape[1:])
            for name, tensor in pending.request.inputs.items()
            if name not in self._ragged
        )

    def _preferred_prefix(self, candidates: list[Pending]) -> list[Pending]:
        """The longest prefix of ``candidates`` whose rows are a preferred size (or none)."""
        rows, best = 0, 0
        for count, pending in enumerate(candidates, start=1):
            rows += pending.batch_size
            if rows in self._preferred:
                best = count
        return candidates[:best]

    # -- shutdown ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Fail what is queued, stop waiting for instances, wait for running executions."""
        self._closed = True
        self._timer.close()
        self.queues.fail_all(UnavailableError("model is being unloaded; request rejected"))
        acquiring = self._acquiring
        if acquiring is not None:
            acquiring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acquiring
        # A callback still registered gives its instance back when it is called.
        self._give_back()
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
