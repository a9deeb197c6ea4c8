"""Model instances and the workers they execute on.

This is the one module that owns threads for model execution. Each instance gets its own
single-thread worker, so an instance never runs two batches at once (as in Triton) and
``count: N`` means N batches in flight. Backends that release the GIL (onnxruntime, torch)
run truly in parallel on these threads. A python-backend instance lives in its own stub
process, which the core drives from the loop (``execute_async``); its thread only serves
decoupled models and a stub being restarted.

Schedulers reserve an instance with ``acquire`` (any idle one, or a given one for sequence
slots), ``try_acquire`` (an idle one now, if any) or ``when_free`` (a callback handed the next
one in the call that frees it), run a batch on it with ``submit``, and give it back with
``release``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeAlias

from workbench import threads
from workbench.backends.base import Backend, InstanceContext, LoopModelInstance, ModelInstance
from workbench.core.rate_limiter import RateLimiter, Resources
from workbench.threads import Work


@dataclass(slots=True, eq=False)
class Worker:
    """One instance and its thread; doubles as the scheduler's ``Slot``."""

    index: int
    name: str
    executor: ThreadPoolExecutor
    instance: ModelInstance | None = None
    #: what the rate limiter must grant before this instance executes
    resources: Resources = field(default_factory=Resources)
    #: the instance again when the loop can drive it (``LoopModelInstance``), else None:
    #: decided once, when the instance is created, not per execution
    on_loop: LoopModelInstance | None = None


#: an acquirer's wait: a future, or a callback (``InstancePool.when_free``)
_Waiter: TypeAlias = "asyncio.Future[Worker] | Callable[[Worker], None]"


def _gone(waiter: _Waiter) -> bool:
    """A future that no longer waits (cancelled, or handed a worker already)."""
    return isinstance(waiter, asyncio.Future) and waiter.done()


class InstancePool:
    """The instances of one model version, handed out one execution at a time."""

    def __init__(
        self,
        contexts: Sequence[InstanceContext],
        resources: Sequence[Resources] | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._contexts = list(contexts)
        needs = list(resources) if resources is not None else [Resources()] * len(contexts)
        self._workers = [
            Worker(
                index,
                ctx.instance_name,
                threads.instance_worker(ctx.instance_name),
                resources=need,
            )
            for index, (ctx, need) in enumerate(zip(self._contexts, needs, strict=True))
        ]
        self._limiter = limiter
        self._idle: deque[Worker] = deque()
        #: acquirers waiting for an instance, first come first served: (the index wanted or
        #: None, a future, or a callback that takes the instance in the call that frees it)
        self._waiters: deque[tuple[int | None, _Waiter]] = deque()

    def __len__(self) -> int:
        return len(self._workers)

    async def create(self, backend: Backend) -> None:
        """Create every instance on its own worker thread; on failure close what was made."""
        loop = asyncio.get_running_loop()
        jobs = [
            loop.run_in_executor(worker.executor, backend.create_instance, ctx)
            for worker, ctx in zip(self._workers, self._contexts, strict=True)
        ]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for worker, result in zip(self._workers, results, strict=True):
            if not isinstance(result, BaseException):
                worker.instance = result
                worker.on_loop = result if isinstance(result, LoopModelInstance) else None
                self._idle.append(worker)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.close()
            raise errors[0]
        if self._limiter is not None:
            for worker in self._workers:
                self._limiter.register(worker.resources)

    # -- reservation ---------------------------------------------------------------------------
    async def acquire(self, index: int | None = None) -> Worker:
        """Wait for an idle instance (``index``: that one), then for its rate-limit resources."""
        worker = self._take_idle(index)
        if worker is None:
            future: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
            self._waiters.append((index, future))
            try:
                worker = await future
            except asyncio.CancelledError:
                # Handed a worker in the same tick as the cancellation: pass it on.
                if future.done() and not future.cancelled():
                    self.release(future.result())
                raise
        if self._limiter is not None:
            try:
                await self._limiter.acquire(worker.resources)
            except BaseException:
                self._hand_over(worker)
                raise
        return worker

    def when_free(self, take: Callable[[Worker], None]) -> bool:
        """Have ``take`` called with the next instance free, in the call that frees it (after
        the waiters before it): a scheduler dispatches its next batch there, before the loop
        reads anything else, so a freed instance does not idle while the loop serves other
        callbacks. False, with nothing registered, under a rate limiter (whose resources are
        awaited) or while an instance is idle: ``acquire`` then."""
        if self._limiter is not None:
            return False
        waiters = self._waiters
        if any(_gone(waiter) for _, waiter in waiters):  # acquirers that gave up waiting
            self._waiters = waiters = deque(entry for entry in waiters if not _gone(entry[1]))
        if self._idle:  # idle, yet held back for a waiter that wants another instance
            return False  # (``acquire`` takes it at once)
        waiters.append((None, take))
        return True

    def try_acquire(self) -> Worker | None:
        """An idle instance whose rate-limit resources are free now, without waiting."""
        if self._waiters or not self._idle:
            return None
        worker = self._idle[0]
        if self._limiter is not None and not self._limiter.try_acquire(worker.resources):
            return None
        return self._idle.popleft()

    def release(self, worker: Worker) -> None:
        """Give an instance back (and its resources) after, or instead of, an execution."""
        if self._limiter is not None:
            self._limiter.release(worker.resources)
        self._hand_over(worker)

    def _take_idle(self, index: int | None) -> Worker | None:
        for worker in self._idle:
            if index is None or worker.index == index:
                self._idle.remove(worker)
                return worker
        return None

    def _hand_over(self, worker: Worker) -> None:
        """Wake the first waiter that can use ``worker``, else mark it idle."""
        for entry in self._waiters:
            wanted, waiter = entry
            if _gone(waiter):
                continue
            if wanted is None or wanted == worker.index:
                self._waiters.remove(entry)
                if isinstance(waiter, asyncio.Future):
                    waiter.set_result(worker)
                else:
                    waiter(worker)
                return
        self._idle.append(worker)
        while self._waiters and _gone(self._waiters[0][1]):
            self._waiters.popleft()

    # -- execution -----------------------------------------------------------------------------
    def submit(self, worker: Worker, job: Callable[[ModelInstance], object]) -> None:
        """Run ``job`` with the worker's instance on the worker's thread; it reports back to
        the loop itself (no release)."""
        assert worker.instance is not None
        worker.executor.submit(job, worker.instance)

    async def close(self) -> None:
        """Finalize every created instance, then stop the workers.

        ``close`` runs on a fresh thread, not the instance's worker: after a drain nothing runs
        there, but should an ``execute`` hang, a stub-process instance can still be ended.
        """
        for worker in self._workers:
            if worker.instance is not None:
                try:
                    await threads.run(Work.CLOSE, worker.instance.close)
                except Exception:  # user code in finalize() must not stop the others closing
                    pass
                worker.instance = worker.on_loop = None
            worker.executor.shutdown(wait=False)
        for _, waiter in self._waiters:
            if isinstance(waiter, asyncio.Future):
                waiter.cancel()
        self._waiters.clear()
