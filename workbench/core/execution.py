"""Running a scheduled batch on a model's instances, and its results back to the requests.

``InstanceExecutor`` is the schedulers' ``Executor`` (``core/scheduler.py``). Read in order,
one execution goes:

1. ``acquire`` (or ``try_acquire``) reserves an instance of the pool (``core/instances.py``);
2. ``execute`` stamps the batch out of the queue and reshapes its inputs (``_Phases``), then
   runs it one of three ways, decided once per instance (``Worker.on_loop``):

   - a loop instance that can send from this loop step (``start_execute``): its reply settles
     the batch in the callback that reads it;
   - a loop instance otherwise (``execute_async``): awaited in one task, which hands the
     batch to the instance's worker thread when the instance declines the loop too;
   - any other instance (``execute``): on the instance's worker thread, whose last act is one
     ``call_soon_threadsafe`` back to the loop;

3. ``_Phases.finish`` checks and shapes the results and stamps the compute phases;
4. ``_complete`` (on the loop, every path) frees the instance, sets each request's future and
   records the execution. The scheduler awaiting that future hands the result back to
   ``BackendModel`` (``core/model.py``), which answers the request.

Nothing here raises to the scheduler: a failure of the model or of this code fails every
request of the batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.backends.base import ExecResult, LoopModelInstance, ModelInstance, fail_all
from workbench.core.instances import InstancePool, Worker
from workbench.core.request import InferRequest
from workbench.core.request_checks import RequestChecker, reshape_inputs, reshape_outputs
from workbench.core.scheduler import Pending, Slot
from workbench.core.statistics import ModelStatistics
from workbench.errors import InternalError, WorkbenchError


class InstanceExecutor:
    """Runs batches on the instances of one model version (the schedulers' ``Executor``)."""

    def __init__(
        self,
        config: ModelConfig,
        pool: InstancePool,
        stats: ModelStatistics,
        checker: RequestChecker,
    ) -> None:
        self.name = config.name
        self.config = config
        self.pool = pool
        self.instance_count = len(pool)
        self.stats = stats
        self.batched = config.max_batch_size > 0
        self.input_reshapes = checker.input_reshapes
        self.output_reshapes = checker.output_reshapes

    async def acquire(self, index: int | None = None) -> Worker:
        return await self.pool.acquire(index)

    def try_acquire(self) -> Worker | None:
        return self.pool.try_acquire()

    def when_free(self, take: Callable[[Worker], None]) -> bool:
        return self.pool.when_free(take)

    def release(self, slot: Slot) -> None:
        assert isinstance(slot, Worker)
        self.pool.release(slot)

    def execute(self, slot: Slot, batch: list[Pending]) -> asyncio.Future[Any]:
        assert isinstance(slot, Worker)
        loop = asyncio.get_running_loop()
        on_loop = slot.on_loop
        if on_loop is not None:
            # The instance talks to its own process from the loop: no worker-thread hand-off
            # (and no contention for this process's GIL) on the way there and back.
            clock = _Phases(self, batch)
            started = self._start_on_loop(on_loop, slot, clock)
            if started is not None:
                return started
            return loop.create_task(self._run_on_loop(slot, on_loop, clock))
        done: asyncio.Future[None] = loop.create_future()

        def run(instance: ModelInstance) -> None:
            try:
                results = self._run(instance, batch)
            except BaseException as exc:  # our own bug: the requests still get an answer
                results = _failed(batch, exc)
            # Straight back to the loop: one wake-up, no future chained to the thread's.
            loop.call_soon_threadsafe(self._complete, slot, batch, results, done)

        self.pool.submit(slot, run)
        return done

    def _start_on_loop(
        self, instance: LoopModelInstance, slot: Worker, clock: _Phases
    ) -> asyncio.Future[None] | None:
        """Start the execution in this loop step (``start_execute``): its reply then settles
        the requests right where it is read, with no task or future in between. None when it
        declined (nothing was sent; ``execute_async`` does it)."""
        start = instance.start_execute
        batch = clock.batch
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def finished(results: list[ExecResult]) -> None:
            try:
                results = clock.finish(results)
            except BaseException as exc:  # our own bug: the requests still get an answer
                results = _failed(batch, exc)
            self._complete(slot, batch, results, done)

        try:
            if not start(clock.requests, finished):
                return None
        except Exception as exc:  # a bug on the way out: fail these requests, not the loop
            finished(_failed(batch, exc))
        return done

    def _run(self, instance: ModelInstance, batch: list[Pending]) -> list[ExecResult]:
        """One execution, on the instance's worker thread; never raises."""
        clock = _Phases(self, batch)
        try:
            results = instance.execute(clock.requests)
        except Exception as exc:  # a bug in user model code fails the batch, not the server
            results = _failed(clock.requests, exc)
        return clock.finish(results)

    async def _run_on_loop(self, slot: Worker, instance: LoopModelInstance, clock: _Phases) -> None:
        """One execution awaited on the loop (``execute_async``), or on the instance's thread
        when that declines. Its task settles the requests in its last step: no done callback,
        no extra future."""
        batch = clock.batch
        try:
            try:
                results = await instance.execute_async(clock.requests)
                if results is None:
                    results = await self._on_thread(slot, clock.requests)
            except Exception as exc:
                results = _failed(clock.requests, exc)
            results = clock.finish(results)
        except BaseException as exc:  # cancelled (or our bug): still free and answer
            self._complete(slot, batch, _failed(batch, exc))
            raise
        self._complete(slot, batch, results)

    def _on_thread(
        self, slot: Worker, requests: list[InferRequest]
    ) -> asyncio.Future[list[ExecResult]]:
        """``execute`` on the instance's own thread, its results back on the loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[ExecResult]] = loop.create_future()

        def settle(results: list[ExecResult]) -> None:
            if not future.done():  # the awaiting task may have been cancelled
                future.set_result(results)

        def run(instance: ModelInstance) -> None:
            try:
                results = instance.execute(requests)
            except BaseException as exc:  # a bug in user model code fails the batch
                results = _failed(requests, exc)
            loop.call_soon_threadsafe(settle, results)

        self.pool.submit(slot, run)
        return future

    def _complete(
        self,
        slot: Worker,
        batch: list[Pending],
        results: list[ExecResult],
        done: asyncio.Future[None] | None = None,
    ) -> None:
        """Free the instance, give each request its result, record the execution (on the loop).

        The instance goes first: a scheduler waiting for it sends its next batch right here
        (``InstancePool.when_free``), and the results are given whatever that does."""
        try:
            self.pool.release(slot)
        finally:
            rows = 0
            for pending, result in zip(batch, results, strict=True):
                rows += pending.batch_size
                if not pending.future.done():
                    pending.future.set_result(result)
            self.stats.record_execution(rows, batch[0].times)
            if done is not None:
                done.set_result(None)

    def finish_result(self, request: InferRequest, result: ExecResult) -> None:
        """Keep the outputs a request asked for, shaped as its config declares them."""
        if result.error is not None or request.respond is not None:
            return
        try:
            result.outputs = select_outputs(result.outputs, request.requested_outputs)
        except WorkbenchError as exc:
            result.error = exc
            return
        if self.output_reshapes:
            reshape_outputs(self.config, result.outputs, self.batched)

    async def close(self) -> None:
        await self.pool.close()


class _Phases:
    """Times the phases of one execution and shapes its inputs and results (every path)."""

    def __init__(self, executor: InstanceExecutor, batch: list[Pending]) -> None:
        self.executor = executor
        self.batch = batch
        self.started = time.monotonic_ns()
        self.requests = [p.request for p in batch]
        executor.stats.leave_queue(*(p.times for p in batch))
        if executor.input_reshapes:
            for request in self.requests:
                reshape_inputs(executor.config, request, executor.batched)
        self.input_done = time.monotonic_ns()

    def finish(self, results: list[ExecResult]) -> list[ExecResult]:
        infer_done = time.monotonic_ns()
        if len(results) != len(self.requests):
            results = _failed(
                self.requests,
                InternalError(
                    f"model '{self.executor.name}' returned {len(results)} responses for "
                    f"{len(self.requests)} requests"
                ),
            )
        for request, result in zip(self.requests, results, strict=True):
            self.executor.finish_result(request, result)
        output_done = time.monotonic_ns()
        for pending in self.batch:
            pending.times.stamp(self.started, self.input_done, infer_done, output_done)
        return results


def _failed(items: Sequence[object], error: BaseException) -> list[ExecResult]:
    """One failed result per item: a library error as it is, anything else internal."""
    if not isinstance(error, WorkbenchError):
        error = InternalError(f"{type(error).__name__}: {error}")
    return fail_all(len(items), error)


def select_outputs(outputs: list[Tensor], requested: list[str] | None) -> list[Tensor]:
    """Keep the requested outputs, in the order they were asked for."""
    if requested is None:
        return outputs
    by_name = {t.name: t for t in outputs}
    missing = [name for name in requested if name not in by_name]
    if missing:
        raise InternalError(f"model did not produce requested output(s) {missing}")
    return [by_name[name] for name in requested]
