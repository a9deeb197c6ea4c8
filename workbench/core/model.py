"""A loaded model version: checks requests, runs them on its instances, keeps statistics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ExecResult
from workbench.config.dtypes import config_to_wire
from workbench.core.dynamic_batcher import DynamicBatcher
from workbench.core.execution import InstanceExecutor
from workbench.core.instances import InstancePool
from workbench.core.queue_policy import QueueFullError
from workbench.core.request import InferRequest, InferResponse
from workbench.core.request_checks import RequestChecker
from workbench.core.response_cache import ResponseCache, cache_for
from workbench.core.scheduler import DirectScheduler, Executor, Pending, Scheduler
from workbench.core.sequence_batcher import SequenceBatcher
from workbench.core.statistics import ModelStatistics, RequestTimes, failure_reason
from workbench.errors import InvalidArgumentError, WorkbenchError


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
    """A version served by a backend: checks requests, queues them, answers them.

    The request side: ``infer`` / ``infer_stream`` check a request against the config, look it
    up in the response cache, hand it to the scheduler and turn its result into a response,
    recording statistics and traces. The scheduler runs batches through ``executor``
    (``core/execution.py``), which owns the instances.
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
        self.instance_count = len(pool)
        self.stats = ModelStatistics(config.name, version)
        self.decoupled = config.model_transaction_policy.decoupled
        self._checker = RequestChecker(config)
        self._inflight = InFlight()
        self._cache = cache_for(config, cache)
        self.executor = InstanceExecutor(config, pool, self.stats, self._checker)
        self.scheduler: Scheduler = make_scheduler(config, self.executor, model_path)

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
                hit = ExecResult(outputs=lookup.outputs)
                if request.trace is not None:  # Triton: no COMPUTE_* for a cache hit
                    self._report_trace(request, times, hit)
                return self._response(request, hit)
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
                if request.trace is not None:  # once its last response came (or its error)
                    self._report_trace(request, times)

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
        await self.executor.execute(await self.executor.acquire(index), batch)
        results = [pending.future.result() for pending in batch]
        for pending, result in zip(batch, results, strict=True):
            if result.error is None:
                self.stats.record_success(pending.batch_size, pending.times)
        return results

    # -- lifecycle -----------------------------------------------------------------------------
    async def drain(self) -> None:
        await self._inflight.wait_idle()

    async def close(self) -> None:
        await self.scheduler.close()
        await self.executor.close()


async def one_response(
    response: Coroutine[Any, Any, InferResponse],
) -> AsyncIterator[InferResponse]:
    yield await response


def _stream_failure(error: BaseException, times: RequestTimes) -> str:
    """A decoupled request's failure reason: BACKEND once it executed, else the scheduler's."""
    return failure_reason(error) if times.pending else "BACKEND"


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
