"""Triton's dynamic batcher: requests wait in priority queues and leave in batches.

One dispatcher task per model version. It waits for an idle instance first and only then
forms a batch, so requests that arrive while every instance is busy are batched together
(this is where batching comes from under load, even with ``max_queue_delay_microseconds: 0``).
A batch is sent at once when it is full: it has the largest preferred size (``max_batch_size``
without preferred sizes), or the next request would take it past that size or has other
shapes. A batch that has some preferred size is sent at once too. Otherwise the dispatcher
waits until the oldest request has waited ``max_queue_delay_microseconds`` and sends what is
queued. (Each rule was checked against tritonserver 2.51: docs/triton-scheduling-facts.md.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ExecResult
from workbench.core.queue_policy import PriorityQueues
from workbench.core.scheduler import Executor, Pending
from workbench.errors import InternalError, UnavailableError

log = logging.getLogger("workbench.core")

#: below this, waiting is done by yielding to the loop rather than with a timer
_TIMER_RESOLUTION_NS = 2_000_000


class DynamicBatcher:
    """The ``dynamic_batching`` scheduler of one model version."""

    def __init__(self, config: ModelConfig, executor: Executor) -> None:
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
        self._arrived = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- the request side ----------------------------------------------------------------------
    async def submit(self, pending: Pending) -> ExecResult:
        if self._closed:
            raise UnavailableError("model is being unloaded; request rejected")
        self.queues.push(pending)  # raises when the queue is full
        self._arrived.set()
        if self._dispatcher is None:
            self._dispatcher = asyncio.ensure_future(self._dispatch_forever())
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
    async def _dispatch_forever(self) -> None:
        while not self._closed:
            try:
                await self._dispatch_one()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug here must not leave requests waiting forever
                log.exception("dynamic batcher failed; failing the queued requests")
                self.queues.fail_all(InternalError(f"dynamic batcher failed: {exc}"))

    async def _dispatch_one(self) -> None:
        """Wait for requests and an idle instance, then start one batch on it."""
        if not self.queues:
            self._arrived.clear()
            await self._arrived.wait()
            return
        slot = await self._executor.acquire()
        try:
            batch = await self._form_batch()
        except BaseException:
            self._executor.release(slot)
            raise
        if not batch:
            self._executor.release(slot)
            return
        task = asyncio.ensure_future(self._executor.execute(slot, batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _form_batch(self) -> list[Pending]:
        """Wait, as the config says, for the batch to send now; remove it from the queues."""
        while True:
            now = time.monotonic_ns()
            wake_at = self.queues.expire(now)
            candidates, send_now = self._candidates()
            if not candidates:
                if not self.queues:
                    return []
                await self._sleep_until(wake_at)
                continue
            due = min(p.times.received for p in candidates) + self._delay_ns
            if send_now or now >= due:
                return self.queues.take(candidates)
            # A preferred size is sent at once, without waiting for a larger one.
            preferred = self._preferred_prefix(candidates)
            if preferred:
                return self.queues.take(preferred)
            await self._sleep_until(due if wake_at is None else min(due, wake_at))

    def _candidates(self) -> tuple[list[Pending], bool]:
        """The requests the next batch can hold, in priority order, and whether to send now.

        Collection stops at the largest preferred size (``max_batch_size`` without one), at a
        request that would take the batch past it, or at one whose shapes differ. A first
        request larger than every preferred size goes alone.
        """
        chosen: list[Pending] = []
        rows = 0
        shapes: tuple[object, ...] | None = None
        target = self._preferred[-1] if self._preferred else self._max_rows
        for pending in self.queues.in_order():
            key = self._shape_key(pending)
            if shapes is None:
                shapes = key
            if chosen and (rows + pending.batch_size > target or key != shapes):
                return chosen, True
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

    async def _sleep_until(self, deadline_ns: int | None) -> None:
        """Sleep until ``deadline_ns`` or a new arrival, whichever comes first."""
        self._arrived.clear()
        if deadline_ns is None:
            await self._arrived.wait()
            return
        remaining = deadline_ns - time.monotonic_ns()
        if remaining < _TIMER_RESOLUTION_NS:
            # Loop timers are millisecond-grained (libuv); a 100 us queue delay would become
            # up to 1 ms. Yield to the loop instead until the deadline: arrivals still get in.
            while not self._arrived.is_set() and time.monotonic_ns() < deadline_ns:
                await asyncio.sleep(0)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._arrived.wait(), max(remaining, 0) / 1e9)

    # -- shutdown ------------------------------------------------------------------------------
    async def close(self) -> None:
        """Fail what is queued, stop the dispatcher, wait for running executions."""
        self._closed = True
        self.queues.fail_all(UnavailableError("model is being unloaded; request rejected"))
        if self._dispatcher is not None:
            self._dispatcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatcher
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
