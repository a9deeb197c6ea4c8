"""``ModelStreamInfer``: a bidirectional stream of requests and their responses.

What Triton 2.51 does (``src/grpc/stream_infer_handler.cc``), and so what this does:

- Requests are served concurrently as they arrive. Responses of models that are not decoupled
  go out in the order their requests came; a decoupled model's responses go out as they come,
  several per request.
- Every response carries the ``triton_final_response`` parameter (true on a request's last
  one). A decoupled model's bare "final" flag sends nothing, unless the request set
  ``triton_enable_empty_final_response``: then an empty response marks the end.
- A request that cannot be issued (bad version, unknown model, bad parameters or inputs) gets
  a response with ``error_message`` and only the request id. A model's error gets
  ``error_message`` with the request's model name and version and the final flag. Neither
  ends the stream, unless the client sent the ``triton_grpc_error: true`` header: then a
  model's error ends the stream with its gRPC status.
- While tracing is on, each request is sampled as it is read, and a traced one writes its
  trace once its last response has been written (``tracing.StreamTimestamps``).

Beyond Triton: a stream stops reading while ``MAX_PENDING`` of its requests are pending (those
of models that are not decoupled until answered, and responses until written: gRPC holds a
few more, ``native.WRITE_AHEAD``), and reads on once half of those are done. A client that
streams requests faster than they are served, or never reads the responses, so holds the
server to about that many (Triton 2.51 reads and serves every request and holds every
response; ``benchmarks/slow_reader.py``). The native front end then asks gRPC for no further
message (``set_reading``): what the client sends waits in HTTP/2's flow control. A decoupled
model's requests count only by their responses: such a model may hold a request until later
ones of the stream arrive. A client that sends all its requests before it reads any response,
with more responses than its window takes, now waits for itself; tritonclient's and
perf_analyzer's streams read as they send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from tritonclient.grpc.service_pb2 import (
    ModelInferRequest,
    ModelInferResponse,
    ModelStreamInferResponse,
)

from workbench.core.contract import ServingCore
from workbench.core.request import InferResponse
from workbench.core.trace_settings import TraceManager
from workbench.errors import InvalidArgumentError, WorkbenchError
from workbench.server.grpc.inference import PreparedRequest, model_config_of, prepare
from workbench.server.grpc.response_codec import set_final
from workbench.server.grpc.tracing import StreamTimestamps, metadata
from workbench.server.shared_memory import SharedMemoryRegistry
from workbench.server.status import error_message, grpc_status

log = logging.getLogger("workbench.server.grpc")
GRPC_ERROR_HEADER = "triton_grpc_error"
#: a stream's requests served and responses unwritten (see above), before it stops reading
MAX_PENDING = 128


@dataclass(slots=True)
class _Abort:
    """End the stream with this error's status (``triton_grpc_error`` mode)."""

    error: BaseException


@dataclass(slots=True)
class _Traced:
    """A traced request's response, written between GRPC_SEND_START and GRPC_SEND_END; none:
    the request has been answered, its trace can be written."""

    stamps: StreamTimestamps
    response: ModelStreamInferResponse | None


_Item: TypeAlias = "ModelStreamInferResponse | _Traced | _Abort | None"


class StreamSession:
    """One ``ModelStreamInfer`` call: reads requests, serves each, writes responses in turn."""

    def __init__(
        self,
        core: ServingCore,
        context: Any,
        limit: int,
        regions: SharedMemoryRegistry | None = None,
        tracer: TraceManager | None = None,
    ) -> None:
        self.core = core
        self.context = context
        self.limit = limit
        self.regions = regions
        self.tracer = tracer if tracer is not None else TraceManager()
        self.grpc_errors = _header(context, GRPC_ERROR_HEADER) == "true"
        self._out: asyncio.Queue[_Item] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        #: done when the previous in-order (not decoupled) request's response was queued
        self._turn: asyncio.Future[None] | None = None
        #: set while the stream reads (see the module's docstring)
        self._reading = asyncio.Event()
        self._reading.set()
        #: requests to models that are not decoupled, not answered yet
        self._unanswered = 0

    async def run(self, requests: AsyncIterable[ModelInferRequest]) -> None:
        """Serve the stream until the client is done and every response is written."""
        reader = asyncio.ensure_future(self._read(requests))
        try:
            while (item := await self._out.get()) is not None:
                if isinstance(item, _Abort):
                    await self.context.abort(grpc_status(item.error), error_message(item.error))
                if isinstance(item, _Traced):
                    await self._write_traced(item)
                else:
                    await self.context.write(item)
                self._maybe_read_on()
        finally:
            reader.cancel()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(reader, *self._tasks, return_exceptions=True)

    async def _write_traced(self, item: _Traced) -> None:
        if item.response is None:
            item.stamps.release()
            return
        item.stamps.stamp("GRPC_SEND_START")
        await self.context.write(item.response)
        item.stamps.stamp("GRPC_SEND_END")

    async def _read(self, requests: AsyncIterable[ModelInferRequest]) -> None:
        async for message in requests:
            stamps = self._sample(message)
            decoupled = self._is_decoupled(message)
            serving = self._serve(message, self._claim_turn(decoupled), stamps)
            task = asyncio.ensure_future(serving)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if not decoupled:
                self._unanswered += 1
                task.add_done_callback(self._answered)
            if self._pending() >= MAX_PENDING:
                self._read_on(False)
                await self._reading.wait()
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._out.put_nowait(None)

    def _pending(self) -> int:
        return self._unanswered + self._out.qsize()

    def _answered(self, task: asyncio.Task[None]) -> None:
        self._unanswered -= 1
        self._maybe_read_on()

    def _maybe_read_on(self) -> None:
        """Read on once half of what held the stream is done (checked wherever it shrinks:
        a request answered, a response written)."""
        if not self._reading.is_set() and self._pending() < MAX_PENDING // 2:
            self._read_on(True)

    def _read_on(self, on: bool) -> None:
        """Read the stream's next requests, or not (the native front end: not even from the
        client; grpc.aio reads only what it is asked for)."""
        if on:
            self._reading.set()
        else:
            self._reading.clear()
        set_reading = getattr(self.context, "set_reading", None)
        if set_reading is not None:
            set_reading(on)

    def _sample(self, message: ModelInferRequest) -> StreamTimestamps | None:
        """The request's trace (with GRPC_WAITREAD_*: it was read now) when it is sampled."""
        if not self.tracer.enabled:
            return None
        carrier = metadata(self.context) if self.tracer.propagates else None
        trace = self.tracer.sample(message.model_name, carrier)
        return None if trace is None else StreamTimestamps(trace)

    def _claim_turn(self, decoupled: bool) -> tuple[Any, Any]:
        """The turn to wait for and the one to give, for a request that is not decoupled."""
        if decoupled:
            return None, None
        previous, mine = self._turn, asyncio.get_running_loop().create_future()
        self._turn = mine
        return previous, mine

    def _is_decoupled(self, message: ModelInferRequest) -> bool:
        try:
            _, config = model_config_of(self.core, message)
        except WorkbenchError:
            return False
        return bool(config.model_transaction_policy.decoupled)

    async def _serve(
        self, message: ModelInferRequest, turn: tuple[Any, Any], stamps: StreamTimestamps | None
    ) -> None:
        previous, mine = turn
        try:
            if previous is not None:
                await asyncio.shield(previous)
            await self._respond(message, stamps)
        except Exception as exc:  # noqa: BLE001 - a bug fails this request, not the stream
            log.exception("unexpected error in a gRPC stream", exc_info=exc)
            self._put(_failed(message, exc), stamps)
        finally:
            if mine is not None and not mine.done():
                mine.set_result(None)
            if stamps is not None:  # after its responses: written once they are
                self._out.put_nowait(_Traced(stamps, None))

    async def _respond(self, message: ModelInferRequest, stamps: StreamTimestamps | None) -> None:
        try:
            version, config = model_config_of(self.core, message)
            prepared = prepare(message, version, config, self.regions)
        except WorkbenchError as exc:
            self._put(_not_issued(message, exc), stamps)
            return
        if stamps is not None:
            prepared.request.trace = stamps.trace
            stamps.trace.start()
        try:
            responses = self.core.infer_stream(prepared.request)
        except WorkbenchError as exc:
            prepared.release()
            self._put(_not_issued(message, exc), stamps)
            return
        try:
            async with _closing(responses):
                async for response in responses:
                    if stamps is not None:
                        stamps.complete()
                    self._send(prepared, response, message, stamps)
        except WorkbenchError as exc:
            if stamps is not None and stamps.trace.reported:  # a model answered with it
                stamps.complete()
            self._model_error(prepared, message, exc, stamps)
        finally:
            prepared.release()

    def _send(
        self,
        prepared: PreparedRequest,
        response: InferResponse,
        message: ModelInferRequest,
        stamps: StreamTimestamps | None,
    ) -> None:
        final = response.final or not prepared.decoupled
        if prepared.decoupled and _is_flag_only(response):
            if prepared.parameters.empty_final_response:
                echo = _request_echo(message, final)
                self._put(ModelStreamInferResponse(infer_response=echo), stamps)
            return
        encoded = set_final(prepared.encode(response, self.core, self.limit), final)
        self._put(ModelStreamInferResponse(infer_response=encoded), stamps)

    def _model_error(
        self,
        prepared: PreparedRequest,
        message: ModelInferRequest,
        error: WorkbenchError,
        stamps: StreamTimestamps | None,
    ) -> None:
        if not prepared.decoupled and isinstance(error, InvalidArgumentError):
            # The core checks a request against its model when it is issued: Triton's
            # "could not issue" answer, which never ends the stream.
            self._put(_not_issued(message, error), stamps)
        elif self.grpc_errors:
            self._put(_Abort(error))
        else:
            self._put(_failed(message, error), stamps)

    def _put(
        self, response: ModelStreamInferResponse | _Abort, stamps: StreamTimestamps | None = None
    ) -> None:
        if stamps is not None and not isinstance(response, _Abort):
            self._out.put_nowait(_Traced(stamps, response))
        else:
            self._out.put_nowait(response)


def _header(context: Any, key: str) -> str | None:
    for name, value in context.invocation_metadata() or ():
        if name == key:
            return str(value)
    return None


def _is_flag_only(response: InferResponse) -> bool:
    """A final flag that carries no response (Triton's ``COMPLETE_FINAL`` without one)."""
    return response.final and not response.outputs and not response.parameters


def _request_echo(message: ModelInferRequest, final: bool) -> ModelInferResponse:
    """An empty response naming the request (its id, model name and version as sent)."""
    response = ModelInferResponse(
        model_name=message.model_name, model_version=message.model_version, id=message.id
    )
    return set_final(response, final)


def _not_issued(message: ModelInferRequest, error: BaseException) -> ModelStreamInferResponse:
    return ModelStreamInferResponse(
        error_message=error_message(error), infer_response=ModelInferResponse(id=message.id)
    )


def _failed(message: ModelInferRequest, error: BaseException) -> ModelStreamInferResponse:
    return ModelStreamInferResponse(
        error_message=error_message(error), infer_response=_request_echo(message, True)
    )


@contextlib.asynccontextmanager
async def _closing(responses: AsyncIterator[InferResponse]) -> AsyncIterator[None]:
    """Close the core's iterator however the loop over it ends (a cancelled stream too)."""
    try:
        yield
    finally:
        close = getattr(responses, "aclose", None)
        if close is not None:
            await close()


async def serve_stream(
    core: ServingCore,
    requests: AsyncIterable[ModelInferRequest],
    context: Any,
    limit: int,
    regions: SharedMemoryRegistry | None = None,
    tracer: TraceManager | None = None,
) -> None:
    """Serve one ``ModelStreamInfer`` call."""
    await StreamSession(core, context, limit, regions, tracer).run(requests)


__all__ = ["GRPC_ERROR_HEADER", "StreamSession", "serve_stream"]
