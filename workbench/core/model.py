"""A loaded model version: checks requests, runs them on its instances, keeps statistics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.backends.base import ExecResult, LoopModelInstance, ModelInstance, fail_all
from workbench.config.dtypes import config_to_wire
from workbench.core.dynamic_batcher import DynamicBatcher
from workbench.core.instances import InstancePool, Worker
from workbench.core.queue_policy import QueueFullError
from workbench.core.request import InferRequest, InferResponse
from workbench.core.request_checks import RequestChecker, reshape_inputs, reshape_outputs
from workbench.core.response_cache import ResponseCache, cache_for
from workbench.core.scheduler import DirectScheduler, Executor, Pending, Scheduler, Slot
from workbench.core.sequence_batcher import SequenceBatcher
from workbench.core.statistics import ModelStatistics, RequestTimes, failure_reason
from workbench.errors import InternalError, InvalidArgumentError, WorkbenchError


class ServingModel(Protocol):
    """What the lifecycle manager holds for each READY version."""

    name: str
    version: int
    config: ModelConfig
    stats: ModelStatistics

    async def infer(self, request: InferRequest) -> InferResponse: ...

    async def drain(self) -> None: ...

    async def close(self) -> None: ...


class InFlight:
    """Counts requests in flight so that an unload or reload can wait for them."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> InFlight:
        self.count += 1
        self._idle.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()


def model_metadata(config: ModelConfig, versions: list[int]) -> dict[str, Any]:
    """Triton's model metadata JSON for a config (shapes include -1 for the batch dim)."""
    lead = [-1] if config.max_batch_size > 0 else []

    def io(spec: Any) -> dict[str, Any]:
        return {
            "name": spec.name,
            "datatype": config_to_wire(spec.data_type),
            "shape": lead + list(spec.dims),
        }

    return {
        "name": config.name,
        "versions": [str(v) for v in versions],
        "platform": config.platform or config.backend,
        "inputs": [io(i) for i in config.input],
        "outputs": [io(o) for o in config.output],
    }


class BackendModel:
    """A version served by a backend: checks requests, schedules them on its instances.

    It is the schedulers' ``Executor``: they reserve an instance (``acquire``) and hand it a
    batch (``execute``); the batch runs on the instance's worker thread, or, for instances that
    talk to their own process (stub processes), is sent from the loop: ``start_execute`` sends
    it in the scheduler's own loop step and settles it from the reply's callback, and
    ``execute_async`` (awaited in a task) serves when that path declines. Either way it
    completes on the loop, where every request's future is settled and the statistics recorded.
    """

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        pool: InstancePool,
        cache: ResponseCache | None = None,
        model_path: Path | None = None,
    ) -> None:
        self.name = config.name
        self.version = version
        self._version_text = str(version)
        self.config = config
        self.pool = pool
        self.instance_count = len(pool)
        self.stats = ModelStatistics(config.name, version)
        self.decoupled = config.model_transaction_policy.decoupled
        self._checker = RequestChecker(config)
        self._batched = config.max_batch_size > 0
        self._inflight = InFlight()
        self._cache = cache_for(config, cache)
        self.scheduler: Scheduler = make_scheduler(config, self, model_path)

    # -- requests ------------------------------------------------------------------------------
    def check(self, request: InferRequest) -> int:
        """Raise Triton's error for a request this model refuses; its batch size otherwise."""
        return self._checker.check(request)

    async def infer(self, request: InferRequest) -> InferResponse:
        if self.decoupled:
            raise InvalidArgumentError(
                f"model '{self.name}' uses the decoupled transaction policy: its responses "
                "can only be streamed"
            )
        rows = self._checker.check(request)
        times = RequestTimes()
        lookup = None
        if self._cache is not None:
            lookup = self._cache.lookup_request(self.name, self.version, request)
            if lookup.outputs is not None:
                self.stats.record_cache_hit(times, lookup.started_ns, lookup.lookup_ns)
                return self._response(request, ExecResult(outputs=lookup.outputs))
        result = await self._schedule(request, rows, times)
        if request.trace is not None:  # the one check tracing adds to an untraced request
            self._report_trace(request, times, result)
        if result.error is not None:
            if result.error_is_response:
                self.stats.record_success(rows, times)
            else:
                self.stats.record_failure(times, "BACKEND")
            raise result.error
        self.stats.record_success(rows, times)
        if lookup is not None and self._cache is not None:
            miss_ns = self._cache.insert_response(lookup, result.outputs)
            if miss_ns is not None:
                self.stats.record_cache_miss(miss_ns)
        return self._response(request, result)

    async def _schedule(self, request: InferRequest, rows: int, times: RequestTimes) -> ExecResult:
        """Queue the request and wait for its result; a scheduling failure is recorded (with
        Triton's reason, except queue-full rejections, which Triton does not count) and raised."""
        with self._inflight:
            pending = self._pending(request, rows, times)
            try:
                return await self.scheduler.submit(pending)
            except QueueFullError:
                raise
            except WorkbenchError as exc:
                self.stats.record_failure(times, failure_reason(exc))
                if request.trace is not None:
                    self._report_trace(request, times)
                raise
            finally:
                if times.pending:  # it never executed (rejected, timed out, cancelled)
                    self.stats.leave_queue(times)

    def _report_trace(
        self, request: InferRequest, times: RequestTimes, result: ExecResult | None = None
    ) -> None:
        """Write a traced request's timestamps (those its statistics took) and tensors."""
        assert request.trace is not None
        request.trace.report_request(
            self.name,
            self.version,
            request.id,
            times,
            inputs=request.inputs.values(),
            outputs=result.outputs if result is not None and result.error is None else (),
        )

    def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of a request, in order; the last one has ``final`` set.

        The request is checked here (a bad one raises at the call); the model's own errors
        raise from the iterator. For a model that is not decoupled this is its one response.
        """
        if not self.decoupled:
            return one_response(self.infer(request))
        rows = self._checker.check(request)
        return self._stream(request, rows)

    async def _stream(self, request: InferRequest, rows: int) -> AsyncIterator[InferResponse]:
        times = RequestTimes()
        stream = _ResponseStream(asyncio.get_running_loop())
        request.respond = stream.respond
        with self._inflight:
            pending = self._pending(request, rows, times)
            runner = asyncio.ensure_future(self._submit_streaming(pending, stream))
            try:
                async for result, final in stream:
                    if result is not None and result.error is not None:
                        self.stats.record_failure(times, _stream_failure(result.error, times))
                        raise result.error
                    if final:
                        # Recorded before the last yield: a consumer stops reading there.
                        self.stats.record_success(rows, times)
                    if result is not None or final:
                        yield self._response(request, result or ExecResult(), final)
            finally:
                await asyncio.wait([runner])
                if times.pending:
                    self.stats.leave_queue(times)

    async def _submit_streaming(self, pending: Pending, stream: _ResponseStream) -> None:
        """Run a decoupled request; an error of the execution itself ends its stream."""
        try:
            result = await self.scheduler.submit(pending)
        except WorkbenchError as exc:
            result = ExecResult(error=exc)
        if result.error is not None:
            stream.respond(result, True)

    def _pending(self, request: InferRequest, rows: int, times: RequestTimes) -> Pending:
        future: asyncio.Future[ExecResult] = asyncio.get_running_loop().create_future()
        self.stats.enter_queue(times)
        return Pending(request, rows, times, future)

    def _response(
        self, request: InferRequest, result: ExecResult, final: bool = True
    ) -> InferResponse:
        return InferResponse(
            model_name=self.name,
            model_version=self._version_text,
            id=request.id,
            outputs=result.outputs,
            parameters=result.parameters,
            final=final,
        )

    async def run_on_instance(self, index: int, requests: list[InferRequest]) -> list[ExecResult]:
        """Run ``requests`` as one execution on instance ``index``, bypassing the scheduler
        (model warmup; Triton counts warmup executions in the statistics, so do we)."""
        batch = [self._pending(r, 1, RequestTimes()) for r in requests]
        await self.execute(await self.pool.acquire(index), batch)
        results = [pending.future.result() for pending in batch]
        for pending, result in zip(batch, results, strict=True):
            if result.error is None:
                self.stats.record_success(pending.batch_size, pending.times)
        return results

    # -- Executor ------------------------------------------------------------------------------
    async def acquire(self, index: int | None = None) -> Worker:
        return await self.pool.acquire(index)

    def try_acquire(self) -> Worker | None:
        return self.pool.try_acquire()

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
            return loop.create_task(self._run_on_loop(slot, on_loop.execute_async, clock))
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

    def _complete(
        self,
        slot: Worker,
        batch: list[Pending],
        results: list[ExecResult],
        done: asyncio.Future[None] | None = None,
    ) -> None:
        """Free the instance, give each request its result, record the execution (on the loop)."""
        self.pool.release(slot)
        rows = 0
        for pending, result in zip(batch, results, strict=True):
            rows += pending.batch_size
            if not pending.future.done():
                pending.future.set_result(result)
        self.stats.record_execution(rows, batch[0].times)
        if done is not None:
            done.set_result(None)

    def _run(self, instance: ModelInstance, batch: list[Pending]) -> list[ExecResult]:
        """One execution, on the instance's worker thread; never raises."""
        clock = _Phases(self, batch)
        try:
            results = instance.execute(clock.requests)
        except Exception as exc:  # a bug in user model code fails the batch, not the server
            results = _failed(clock.requests, exc)
        return clock.finish(results)

    async def _run_on_loop(
        self,
        slot: Worker,
        execute: Callable[[list[InferRequest]], Awaitable[list[ExecResult]]],
        clock: _Phases,
    ) -> None:
        """One execution awaited on the loop (instances with ``execute_async``). Its task
        settles the requests in its last step: no done callback, no extra future."""
        batch = clock.batch
        try:
            results = await self._execute_on_loop(execute, clock)
        except BaseException as exc:  # cancelled (or our bug): still free and answer
            self._complete(slot, batch, _failed(batch, exc))
            raise
        self._complete(slot, batch, results)

    async def _execute_on_loop(
        self,
        execute: Callable[[list[InferRequest]], Awaitable[list[ExecResult]]],
        clock: _Phases,
    ) -> list[ExecResult]:
        try:
            results = await execute(clock.requests)
        except Exception as exc:
            results = _failed(clock.requests, exc)
        return clock.finish(results)

    def _finish_result(self, request: InferRequest, result: ExecResult) -> None:
        if result.error is not None or request.respond is not None:
            return
        try:
            result.outputs = select_outputs(result.outputs, request.requested_outputs)
        except WorkbenchError as exc:
            result.error = exc
            return
        if self._checker.output_reshapes:
            reshape_outputs(self.config, result.outputs, self._batched)

    # -- lifecycle -----------------------------------------------------------------------------
    async def drain(self) -> None:
        await self._inflight.wait_idle()

    async def close(self) -> None:
        await self.scheduler.close()
        await self.pool.close()


async def one_response(
    response: Coroutine[Any, Any, InferResponse],
) -> AsyncIterator[InferResponse]:
    yield await response


class _Phases:
    """Times the phases of one execution and shapes its inputs and results (either path)."""

    def __init__(self, model: BackendModel, batch: list[Pending]) -> None:
        self.model = model
        self.batch = batch
        self.started = time.monotonic_ns()
        self.requests = [p.request for p in batch]
        model.stats.leave_queue(*(p.times for p in batch))
        if model._checker.input_reshapes:
            for request in self.requests:
                reshape_inputs(model.config, request, model._batched)
        self.input_done = time.monotonic_ns()

    def finish(self, results: list[ExecResult]) -> list[ExecResult]:
        infer_done = time.monotonic_ns()
        if len(results) != len(self.requests):
            results = _failed(
                self.requests,
                InternalError(
                    f"model '{self.model.name}' returned {len(results)} responses for "
                    f"{len(self.requests)} requests"
                ),
            )
        for request, result in zip(self.requests, results, strict=True):
            self.model._finish_result(request, result)
        output_done = time.monotonic_ns()
        for pending in self.batch:
            pending.times.stamp(self.started, self.input_done, infer_done, output_done)
        return results


def _stream_failure(error: BaseException, times: RequestTimes) -> str:
    """A decoupled request's failure reason: BACKEND once it executed, else the scheduler's."""
    return failure_reason(error) if times.pending else "BACKEND"


def _failed(items: Sequence[object], error: BaseException) -> list[ExecResult]:
    """One failed result per item: a library error as it is, anything else internal."""
    if not isinstance(error, WorkbenchError):
        error = InternalError(f"{type(error).__name__}: {error}")
    return fail_all(len(items), error)


class _ResponseStream:
    """The responses of one decoupled request, sent from any thread, read on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[tuple[ExecResult | None, bool]] = asyncio.Queue()
        self._ended = False

    def respond(self, result: ExecResult | None, final: bool) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (result, final))

    def __aiter__(self) -> _ResponseStream:
        return self

    async def __anext__(self) -> tuple[ExecResult | None, bool]:
        if self._ended:
            raise StopAsyncIteration
        result, final = await self._queue.get()
        self._ended = final
        return result, final


def make_scheduler(
    config: ModelConfig, executor: Executor, model_path: Path | None = None
) -> Scheduler:
    """The scheduler the config asks for (Triton: sequence, dynamic or default).

    ``model_path`` is where ``initial_state { data_file }`` files are found.
    """
    if config.HasField("sequence_batching"):
        return SequenceBatcher(config, executor, model_path=model_path)
    if config.HasField("dynamic_batching"):
        return DynamicBatcher(config, executor)
    return DirectScheduler(executor)


def select_outputs(outputs: list[Tensor], requested: list[str] | None) -> list[Tensor]:
    """Keep the requested outputs, in the order they were asked for."""
    if requested is None:
        return outputs
    by_name = {t.name: t for t in outputs}
    missing = [name for name in requested if name not in by_name]
    if missing:
        raise InternalError(f"model did not produce requested output(s) {missing}")
    return [by_name[name] for name in requested]
