"""One ``TritonPythonModel`` object and the calls into it, in whichever process it lives.

The in-process instance and the stub process both drive a model through ``ModelRunner``: it
builds the ``pb_utils`` requests, calls ``initialize``/``execute``/``finalize`` inside the
model's scope, runs coroutines on a background event loop (as Triton's stub does) and turns
what the model returned or sent into ``ExecResult``s. For decoupled models every response goes
through ``ExecRequest.respond`` and ``execute`` must return ``None``, as in Triton.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import types
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench import threads
from workbench.backends._batching import declared_output_types
from workbench.backends.base import ExecRequest, ExecResult, fail_all
from workbench.backends.python import pb_utils
from workbench.backends.python._model_bridge import to_pb_request, to_result
from workbench.backends.python._model_loader import python_error_text, unload_module
from workbench.errors import InternalError, WorkbenchError

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2

_log = logging.getLogger(__name__)

#: receives the future of a coroutine nobody waits for
Background = Callable[[concurrent.futures.Future[Any]], None]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What the runner needs from the model configuration (plain data: it crosses to stubs)."""

    name: str
    decoupled: bool
    #: every output, in configuration order (what ``requested_output_names()`` defaults to)
    outputs: tuple[str, ...]
    #: output name -> declared wire datatype
    declared: dict[str, str]
    #: the instance's name (e.g. ``add_sub_0_0``): Triton's errors of ``execute`` name it
    instance: str = ""

    @property
    def label(self) -> str:
        """The name Triton's python backend gives the model in its errors: the instance's."""
        return self.instance or self.name

    @classmethod
    def of(cls, config: model_config_pb2.ModelConfig, instance: str = "") -> ModelSpec:
        """The spec of a (completed) model configuration, for the instance called ``instance``."""
        return cls(
            name=config.name,
            decoupled=config.model_transaction_policy.decoupled,
            outputs=tuple(out.name for out in config.output),
            declared=declared_output_types(config),
            instance=instance,
        )


class ModelRunner:
    """A ``TritonPythonModel`` object, the scope its code runs in and its event loop."""

    def __init__(
        self,
        spec: ModelSpec,
        module: types.ModuleType,
        scope: pb_utils._ModelScope,
        *,
        per_call_scope: bool = True,
    ) -> None:
        """``per_call_scope=False``: ``scope`` is the process's already (a stub process)."""
        self.spec = spec
        self.module = module
        self._scope = scope
        self._per_call_scope = per_call_scope
        self._model: Any = None
        self._loop: _LoopThread | None = None

    def _call(self, method: str, *args: Any, background: Background | None = None) -> Any:
        """Call a model method in its scope; a coroutine runs on the instance's loop thread.

        With ``background`` a coroutine is not waited for (Triton's decoupled ``async
        execute``): its future goes to ``background`` and the call returns ``None``.
        """
        if self._per_call_scope:
            token = pb_utils._scope.set(self._scope)
            try:
                result = getattr(self._model, method)(*args)
            finally:
                pb_utils._scope.reset(token)
        else:
            result = getattr(self._model, method)(*args)
        # ``type(...) is list`` first: ``iscoroutine`` of anything else costs an ABC check.
        if type(result) is list or result is None or not asyncio.iscoroutine(result):
            return result
        if self._loop is None:
            self._loop = _LoopThread(f"{self.spec.name}-asyncio")
        future = self._loop.submit(self._scoped(result))
        if background is not None:
            background(future)
            return None
        return future.result()

    async def _scoped(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        # A task copies the context of the loop thread, not the caller's: set the scope in it.
        pb_utils._scope.set(self._scope)
        return await coroutine

    def initialize(self, args: dict[str, str]) -> None:
        """Build ``TritonPythonModel`` and call its ``initialize(args)``; failures raise."""
        token = pb_utils._scope.set(self._scope)
        try:
            try:
                self._model = self.module.TritonPythonModel()
            finally:
                pb_utils._scope.reset(token)
            if hasattr(self._model, "initialize"):
                self._call("initialize", args)
        except WorkbenchError:
            raise
        except Exception as exc:
            raise InternalError(
                f"failed to initialize model '{self.spec.name}': {type(exc).__name__}: {exc}"
            ) from exc

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Run the model's ``execute`` on ``requests``; one result per request, in order.

        For a decoupled model the results are empty placeholders: its responses went through
        each request's ``respond``, an execution error included.
        """
        if self.spec.decoupled:
            pb_requests = [self._pb_request(request) for request in requests]
            return self._execute_decoupled(pb_requests, requests)
        outputs = self.spec.outputs
        pb_requests = [to_pb_request(request, outputs) for request in requests]
        try:
            responses = self.run(pb_requests)
        except WorkbenchError as error:
            return fail_all(len(requests), error)
        return [
            to_result(response, request, self.spec.declared, self.spec.label)
            for response, request in zip(responses, requests, strict=True)
        ]

    def run(self, pb_requests: list[pb_utils.InferenceRequest]) -> list[Any]:
        """The model's response to each request (not decoupled): returned, or sent.

        A failed ``execute`` raises the ``InternalError`` that fails every request.
        """
        try:
            return _responses(pb_requests, self._call("execute", pb_requests))
        except Exception as exc:
            error = self._execute_error(exc)
        raise error  # outside the handler: the error does not keep the model's frames alive

    def _execute_decoupled(
        self, pb_requests: list[pb_utils.InferenceRequest], requests: Sequence[ExecRequest]
    ) -> list[ExecResult]:
        """Triton: ``execute`` must return None; on an error every open stream gets it."""

        def background(future: concurrent.futures.Future[Any]) -> None:
            done = functools.partial(self._background_done, pb_requests, requests)
            future.add_done_callback(done)

        try:
            if self._call("execute", pb_requests, background=background) is not None:
                raise _ExecuteError(
                    f"Python model '{self.spec.label}' is using the decoupled mode and the "
                    "execute function must return None."
                )
        except Exception as exc:
            error = self._execute_error(exc)
            _log.error("%s", error.message)
            _fail_open(pb_requests, requests, error)
        return [ExecResult() for _ in requests]

    def _background_done(
        self,
        pb_requests: list[pb_utils.InferenceRequest],
        requests: Sequence[ExecRequest],
        future: concurrent.futures.Future[Any],
    ) -> None:
        """A decoupled ``async execute`` ended: log its exception and end the open streams.

        Triton only logs it; ending the streams too spares clients a wait that never ends.
        """
        if future.cancelled() or future.exception() is None:
            return
        exc = future.exception()
        assert exc is not None
        error = self._execute_error(exc)
        _log.error("%s", error.message, exc_info=exc)
        _fail_open(pb_requests, requests, error)

    def _execute_error(self, exc: BaseException) -> InternalError:
        message = str(exc) if isinstance(exc, _ExecuteError) else python_error_text(exc)
        return InternalError(
            f"Failed to process the request(s) for model '{self.spec.label}', message: {message}"
        )

    def _pb_request(self, request: ExecRequest) -> pb_utils.InferenceRequest:
        pb_request = to_pb_request(request, self.spec.outputs)
        if self.spec.decoupled:
            pb_request._deliver = functools.partial(self._deliver, request)
        return pb_request

    def _deliver(self, request: ExecRequest, response: Any, final: bool) -> None:
        """Forward one response a decoupled model sent (from any thread)."""
        respond = request.respond
        if respond is None:
            raise pb_utils.TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        result = None
        if response is not None:
            result = to_result(response, request, self.spec.declared, self.spec.label)
        respond(result, final)

    def finalize(self) -> None:
        """Call the model's ``finalize`` (errors are logged, as Triton does)."""
        if hasattr(self._model, "finalize"):
            try:
                self._call("finalize")
            except Exception:
                _log.exception("finalize failed for model '%s'", self.spec.name)

    def discard(self) -> None:
        """Stop the event loop and forget the module, without calling ``finalize``."""
        if self._loop is not None:
            self._loop.stop()
            self._loop = None
        unload_module(self.module)


def _responses(requests: list[pb_utils.InferenceRequest], returned: Any) -> list[Any]:
    """The response of each request, returned or sent through its response sender."""
    if type(returned) is list and len(returned) == len(requests) == 1 and returned[0] is not None:
        return returned  # the usual case: one request, its response returned
    if returned is None:
        returned = [None] * len(requests)
    if not isinstance(returned, list):
        raise _ExecuteError(
            f"Expected a list in the execute return, found type '{type(returned).__name__}'."
        )
    if len(returned) != len(requests):
        raise _ExecuteError(f"expected {len(requests)} responses, got {len(returned)}")
    responses = []
    for request, response in zip(requests, returned, strict=True):
        sender = request._sender
        if response is None and sender is not None:
            response = sender.response
        if response is None:
            raise _ExecuteError(f"no response was sent for request '{request.request_id()}'")
        responses.append(response)
    return responses


def _fail_open(
    pb_requests: list[pb_utils.InferenceRequest],
    requests: Sequence[ExecRequest],
    error: WorkbenchError,
) -> list[ExecResult]:
    """End every still-open stream with ``error`` and close its sender (Triton does so)."""
    for pb_request, request in zip(pb_requests, requests, strict=True):
        if pb_request.get_response_sender()._close() and request.respond is not None:
            request.respond(ExecResult(error=error), True)
    return [ExecResult() for _ in requests]


class _LoopThread:
    """A private event loop running forever in a daemon thread, as in Triton's stub."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threads.start(name, self.loop.run_forever)

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Cancel what still runs, stop the loop and close it (bounded waits)."""
        done = asyncio.run_coroutine_threadsafe(_shutdown(timeout_s), self.loop)
        with contextlib.suppress(Exception):
            done.result(timeout_s)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()


async def _shutdown(timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    tasks = [t for t in asyncio.all_tasks(loop) if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout_s)
    await loop.shutdown_default_executor()


class _ExecuteError(Exception):
    """A broken ``execute`` contract (wrong return type or count)."""
