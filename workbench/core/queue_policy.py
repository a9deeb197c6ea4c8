"""The dynamic batcher's queues: one per priority level, each with its queue policy.

Triton's semantics (``ModelQueuePolicy`` in model_config.proto):

- a request's level is its ``priority`` parameter; 0 or a level above ``priority_levels``
  means ``default_priority_level``; level 1 is served first;
- ``max_queue_size`` (0 = unbounded): a request that finds its level's queue full is rejected
  at once with ``UNAVAILABLE``;
- ``default_timeout_microseconds`` (0 = none); with ``allow_timeout_override`` a request's
  ``timeout`` parameter (microseconds) may shorten a non-zero default, never lengthen it (with
  no default, Triton 2.51 ignores the request's timeout: observed);
- a request still queued at its deadline is rejected (``timeout_action: REJECT``) or moved
  behind every request of its level that has not timed out (``DELAY``) and kept.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelQueuePolicy

from workbench.core.scheduler import Pending
from workbench.errors import UnavailableError

QUEUE_FULL = "Exceeds maximum queue size"
TIMED_OUT = "Request timeout expired"


class QueueFullError(UnavailableError):
    """Rejected on arrival; Triton counts such a request nowhere in the statistics."""


class QueueTimeoutError(UnavailableError):
    """Waited in a queue past its deadline; a failure of reason REJECTED in the metrics."""

    failure_reason = "REJECTED"


class _LevelQueue:
    """The requests of one priority level: waiting ones, then delayed (timed-out) ones."""

    def __init__(self, policy: ModelQueuePolicy) -> None:
        self.policy = policy
        self.waiting: deque[Pending] = deque()
        self.delayed: deque[Pending] = deque()

    def __len__(self) -> int:
        return len(self.waiting) + len(self.delayed)

    def deadline_ns(self, pending: Pending) -> int:
        """The time this level's policy (and the request's override) lets it wait until."""
        timeout_us = self.policy.default_timeout_microseconds
        if not timeout_us:  # a request's timeout only shortens a default one
            return 0
        asked = _int_parameter(pending, "timeout")
        if self.policy.allow_timeout_override and asked > 0 and timeout_us > 0:
            timeout_us = min(asked, timeout_us)
        return pending.times.received + timeout_us * 1000 if timeout_us > 0 else 0

    def expire(self, now: int) -> int | None:
        """Apply the timeout action to overdue requests; return the next deadline, if any."""
        next_deadline: int | None = None
        for pending in list(self.waiting):
            if not pending.deadline_ns:
                continue
            if pending.deadline_ns <= now:
                self.waiting.remove(pending)
                if self.policy.timeout_action == ModelQueuePolicy.DELAY:
                    pending.deadline_ns = 0
                    self.delayed.append(pending)
                else:
                    pending.fail(QueueTimeoutError(TIMED_OUT))
            elif next_deadline is None or pending.deadline_ns < next_deadline:
                next_deadline = pending.deadline_ns
        return next_deadline

    def discard_settled(self) -> None:
        """Drop requests whose caller went away (cancelled futures)."""
        for queue in (self.waiting, self.delayed):
            while queue and queue[0].future.done():
                queue.popleft()


def _int_parameter(pending: Pending, key: str) -> int:
    value = pending.request.parameters.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class PriorityQueues:
    """Every level's queue of one model version, visited in priority order."""

    def __init__(self, config: ModelConfig) -> None:
        settings = config.dynamic_batching
        self.levels = int(settings.priority_levels)
        self.default_level = int(settings.default_priority_level) or (1 if self.levels else 0)
        overrides = settings.priority_queue_policy
        self._queues = {
            level: _LevelQueue(
                overrides[level] if level in overrides else settings.default_queue_policy
            )
            for level in (range(1, self.levels + 1) if self.levels else [0])
        }
        #: the queues, best level first
        self._ordered = [self._queues[level] for level in sorted(self._queues)]
        #: without a default timeout no request gets a deadline: nothing ever expires
        self._timeouts = any(q.policy.default_timeout_microseconds for q in self._ordered)

    def level_of(self, pending: Pending) -> int:
        if not self.levels:
            return 0
        asked = _int_parameter(pending, "priority")
        return asked if 0 < asked <= self.levels else self.default_level

    def push(self, pending: Pending) -> None:
        """Queue a request at its level; raise ``UnavailableError`` when that queue is full."""
        pending.priority = self.level_of(pending)
        queue = self._queues[pending.priority]
        queue.discard_settled()
        if queue.policy.max_queue_size and len(queue) >= queue.policy.max_queue_size:
            request_id = pending.request.id or "<id_unknown>"
            raise QueueFullError(f"[request id: {request_id}] {QUEUE_FULL}")
        pending.deadline_ns = queue.deadline_ns(pending)
        queue.waiting.append(pending)

    def expire(self, now: int | None = None) -> int | None:
        """Time out overdue requests at every level; return the earliest remaining deadline."""
        if not self._timeouts:
            return None
        now = time.monotonic_ns() if now is None else now
        deadlines = [d for q in self._queues.values() if (d := q.expire(now)) is not None]
        return min(deadlines, default=None)

    def in_order(self) -> Iterator[Pending]:
        """Queued requests that still wait for a result, best level first, oldest first."""
        for queue in self._ordered:
            for pending in (*queue.waiting, *queue.delayed):
                if not pending.future.done():
                    yield pending

    def take(self, batch: list[Pending]) -> list[Pending]:
        """Remove ``batch`` from the queues and return it."""
        for pending in batch:
            queue = self._queues[pending.priority]
            if pending in queue.waiting:
                queue.waiting.remove(pending)
            else:
                queue.delayed.remove(pending)
        return batch

    def fail_all(self, error: Exception) -> None:
        for queue in self._queues.values():
            for pending in (*queue.waiting, *queue.delayed):
                pending.fail(error)
            queue.waiting.clear()
            queue.delayed.clear()

    def __bool__(self) -> bool:
        for queue in self._ordered:
            for pending in (*queue.waiting, *queue.delayed):
                if not pending.future.done():
                    return True
        return False
