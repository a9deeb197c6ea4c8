"""What every scheduler shares: the queued request, the executor contract, the default scheduler.

A scheduler decides *which requests run together and when*; the model's ``Executor`` decides
*where* (an idle instance, with its rate-limiter resources) and runs them. Schedulers:

- ``DirectScheduler``: Triton's default scheduler, one request per execution.
- ``DynamicBatcher`` (``dynamic_batcher.py``): queues, priorities, policies, preferred sizes.
- ``SequenceBatcher`` (``sequence_batcher.py``): stateful sequences bound to instance slots.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from workbench.backends.base import ExecResult
from workbench.core.request import InferRequest
from workbench.core.statistics import RequestTimes


@dataclass(slots=True, eq=False)
class Pending:
    """One request between its arrival and its result; ``future`` carries the result."""

    request: InferRequest
    #: rows along dimension 0 (1 for models with ``max_batch_size: 0``)
    batch_size: int
    times: RequestTimes
    future: asyncio.Future[ExecResult]
    #: Triton's priority level (1 is served first); 0 when the model has no levels
    priority: int = 0
    #: ``time.monotonic_ns()`` after which a queued request times out; 0 = never
    deadline_ns: int = 0

    def fail(self, error: BaseException) -> None:
        """Fail the request unless it already has its result (or was cancelled)."""
        if not self.future.done():
            self.future.set_exception(error)


class Slot(Protocol):
    """An instance reserved for one execution (and the rate-limiter resources it holds)."""

    #: index of the instance in the model's pool (stable for the model's lifetime)
    index: int


class Executor(Protocol):
    """How schedulers reach a model's instances (``core/execution.py``'s ``InstanceExecutor``)."""

    #: number of instances
    instance_count: int

    async def acquire(self, index: int | None = None) -> Slot:
        """Wait for an idle instance (``index``: that one) and its rate-limiter resources."""
        ...

    def try_acquire(self) -> Slot | None:
        """An idle instance and its resources if both are free now (nobody waits for them)."""
        ...

    def when_free(self, take: Callable[[Slot], None]) -> bool:
        """Have ``take`` called with the next free slot, within the call that frees it (an
        execution's end), instead of a task awaiting ``acquire``. False, with nothing
        registered, where ``acquire`` must be used instead (a rate limiter's resources, or a
        slot idle but held for another waiter)."""
        ...

    def release(self, slot: Slot) -> None:
        """Give back a slot that was acquired but not used for an execution."""
        ...

    def execute(self, slot: Slot, batch: list[Pending]) -> Awaitable[None]:
        """Start ``batch`` on ``slot`` as one execution; it settles every future and releases
        ``slot`` when it ends. Returns at once; the awaitable (which need not be awaited)
        completes after that. Never raises: a failure fails every request of the batch.
        """
        ...


class Scheduler(Protocol):
    async def submit(self, pending: Pending) -> ExecResult:
        """Queue the request and wait for its result (queue-time errors raise)."""
        ...

    async def close(self) -> None:
        """Stop scheduling; fail whatever is still queued (``UnavailableError``)."""
        ...


@dataclass(slots=True)
class DirectScheduler:
    """Triton's default scheduler: each request is its own execution on the next idle instance."""

    executor: Executor

    async def submit(self, pending: Pending) -> ExecResult:
        slot = self.executor.try_acquire()
        if slot is None:
            slot = await self.executor.acquire()
        # The execution is not tied to this coroutine: a client disconnect (cancelling it)
        # does not interrupt a model half-way, and the instance is freed when it ends.
        self.executor.execute(slot, [pending])
        return await pending.future

    async def close(self) -> None:
        """Nothing queues here; executions still running finish on their own."""
