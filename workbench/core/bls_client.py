"""Python-backend BLS: model code calling back into this server from a worker thread.

Errors read as Triton 2.51's python backend words them (``src/request_executor.cc``): a request
the server refuses before it reaches the model (the model is not ready, a decoupled model called
without ``decoupled=True``, inputs that do not fit) is an ``INTERNAL`` error "Model <m> - Error
when running inference: <why>"; an error of the model itself keeps its code and message.

A refusal is told apart from a model error only when a call fails, by running the request's
checks again on its inputs as sent (an execution reshapes them in place): a successful call
pays only for a copy of its input dict.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from workbench._types import Parameters, Tensor
from workbench.backends.base import ExecResult, RequestTrace
from workbench.core.lifecycle import ModelManager
from workbench.core.model import BackendModel
from workbench.core.request import InferRequest, InferResponse
from workbench.core.trace import InferenceTrace
from workbench.errors import InternalError, WorkbenchError

T = TypeVar("T")


class ServingCore(Protocol):
    """What BLS needs of ``InferenceCore`` (which satisfies it; named here to keep the
    core's modules free of an import circle)."""

    models: ModelManager

    async def infer(self, request: InferRequest) -> InferResponse: ...

    def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]: ...

    def model_ready(self, name: str, version: str = "") -> bool: ...


class CoreClient:
    """The ``InferenceClient`` that python models of this server call (BLS)."""

    def __init__(self, core: ServingCore, loop: asyncio.AbstractEventLoop) -> None:
        self._core = core
        self._loop = loop

    def infer_sync(
        self,
        model_name: str,
        inputs: Sequence[Tensor],
        *,
        model_version: int = -1,
        requested_outputs: Sequence[str] | None = None,
        parameters: Parameters | None = None,
        timeout_s: float | None = None,
        trace: RequestTrace | None = None,
        request_id: str = "",
    ) -> list[Tensor]:
        request = _request(
            model_name, inputs, model_version, requested_outputs, parameters, request_id
        )
        return self._call(self._infer(request, trace), timeout_s).outputs

    def infer_stream_sync(
        self,
        model_name: str,
        inputs: Sequence[Tensor],
        *,
        model_version: int = -1,
        requested_outputs: Sequence[str] | None = None,
        parameters: Parameters | None = None,
        timeout_s: float | None = None,
        trace: RequestTrace | None = None,
        request_id: str = "",
    ) -> Iterator[tuple[ExecResult, bool]]:
        request = _request(
            model_name, inputs, model_version, requested_outputs, parameters, request_id
        )
        sent = self._sent(request)
        responses = self._call(self._open_stream(request, sent, trace), timeout_s)
        if isinstance(responses, ExecResult):  # refused at the call (its trace let go)
            yield responses, True
            return
        try:
            while True:
                step = self._call(self._next(sent, responses), timeout_s)
                if step is None:
                    return
                yield step
                if step[1]:
                    return
        finally:
            # A model that stops reading early: end the stream on the loop (its execution
            # still runs to its end there, as Triton drains an abandoned response iterator).
            # So does the request of a final response: its trace waits for that end.
            asyncio.run_coroutine_threadsafe(_close(responses, request.trace), self._loop)

    def is_model_ready(self, model_name: str, model_version: int = -1) -> bool:
        version = "" if model_version < 0 else str(model_version)
        return self._core.model_ready(model_name, version)

    # -- on the loop ---------------------------------------------------------------------------
    async def _infer(self, request: InferRequest, parent: RequestTrace | None) -> InferResponse:
        sent = self._sent(request)
        if parent is not None:
            request.trace = _child(parent)
        try:
            return await self._core.infer(request)
        except WorkbenchError as exc:
            raise self._refusal(sent, decoupled=False) or exc from None
        finally:
            _let_go(request.trace)

    def _sent(self, request: InferRequest) -> InferRequest:
        """A copy of ``request`` with its own input dict, kept for ``_refusal``."""
        return dataclasses.replace(request, inputs=dict(request.inputs))

    async def _open_stream(
        self, request: InferRequest, sent: InferRequest, parent: RequestTrace | None
    ) -> AsyncIterator[InferResponse] | ExecResult:
        if parent is not None:
            request.trace = _child(parent)
        try:
            return self._core.infer_stream(request)
        except WorkbenchError as exc:
            _let_go(request.trace)
            return ExecResult(error=self._refusal(sent, decoupled=True) or exc)

    async def _next(
        self, request: InferRequest, responses: AsyncIterator[InferResponse]
    ) -> tuple[ExecResult, bool] | None:
        try:
            response = await anext(responses)
        except StopAsyncIteration:
            return None
        except WorkbenchError as exc:
            return ExecResult(error=self._refusal(request, decoupled=True) or exc), True
        return ExecResult(response.outputs, None, response.parameters), response.final

    def _refusal(self, request: InferRequest, *, decoupled: bool) -> WorkbenchError | None:
        """Triton's wrapped error when the server refuses ``request``; None when it would not."""
        name = request.model_name
        if not self._core.model_ready(name, request.model_version):
            why = f"Failed for execute the inference request. Model '{name}' is not ready."
            return _wrapped(name, why)
        model = self._core.models.get(name, request.model_version)
        if not isinstance(model, BackendModel):
            return None
        if model.decoupled and not decoupled:
            return _wrapped(name, _DECOUPLED.format(name=name))
        try:
            model.check(request)
        except WorkbenchError as exc:
            return _wrapped(name, exc.message)
        return None

    def _call(self, work: Coroutine[Any, Any, T], timeout_s: float | None) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout_s)


#: Triton 2.51's text for ``exec()`` (not ``decoupled=True``) on a decoupled model
_DECOUPLED = (
    "Model {name} is using the decoupled. The current BLS request call doesn't support models "
    "using the decoupled transaction policy. Please use 'decoupled=True' argument to the "
    "'exec' or 'async_exec' calls for decoupled models.'"
)


def _child(parent: RequestTrace) -> InferenceTrace | None:
    """The trace of a BLS request made with ``trace=request.trace()`` (spawned on the loop,
    as an ensemble's steps are): a child of the calling request's, written with it, which the
    core reports like any traced request's. It holds the caller's record until the call has
    ended (``_let_go``): a decoupled model may end its request after the caller answered.
    Python models hand back what they were given, so a trace that is not this core's (there
    is none) traces nothing."""
    return parent.spawn(hold=True) if isinstance(parent, InferenceTrace) else None


def _let_go(trace: InferenceTrace | None) -> None:
    """The BLS request of ``trace`` (``_child``'s, or None) has ended."""
    if trace is not None:
        trace.let_go()


def _wrapped(name: str, why: str) -> InternalError:
    return InternalError(f"Model {name} - Error when running inference: {why}")


def _request(
    model_name: str,
    inputs: Sequence[Tensor],
    model_version: int,
    requested_outputs: Sequence[str] | None,
    parameters: Parameters | None,
    request_id: str,
) -> InferRequest:
    return InferRequest(
        id=request_id,
        model_name=model_name,
        model_version="" if model_version < 0 else str(model_version),
        inputs={t.name: t for t in inputs},
        requested_outputs=list(requested_outputs) if requested_outputs else None,
        parameters=dict(parameters or {}),
    )


async def _close(responses: AsyncIterator[InferResponse], trace: InferenceTrace | None) -> None:
    """End a decoupled BLS call's stream (the core reports its trace then), then its hold."""
    try:
        if isinstance(responses, AsyncGenerator):
            await responses.aclose()
    finally:
        _let_go(trace)


__all__ = ["CoreClient", "ServingCore"]
