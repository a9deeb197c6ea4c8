"""The contract between the core (layer 3) and a backend (layer 2).

A backend turns a model folder into instances; an instance executes a batch of requests.
The core owns scheduling, threads and statistics; a backend only computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Parameters, Tensor
from workbench.backends.exit_deadline import ExitDeadline
from workbench.errors import WorkbenchError


class RequestTrace(Protocol):
    """A traced request's trace as a backend passes it on (``core.trace.InferenceTrace``
    satisfies it): a python model's BLS call made with ``trace=request.trace()`` hands it back
    to the ``InferenceClient``, which traces the BLS request as its child (``parent_id``)."""

    @property
    def id(self) -> int: ...

    def get_context(self) -> str | None:
        """The OpenTelemetry context a model hands on (Triton's ``get_context``), or None."""
        ...


@dataclass(frozen=True, slots=True)
class TraceRef:
    """A trace known by its id (and its OpenTelemetry context, in that mode): what a stub
    process holds of its requests' traces."""

    id: int
    context: str | None = None

    def get_context(self) -> str | None:
        return self.context


class ExecRequest(Protocol):
    """One inference request as a backend sees it (``core.InferRequest`` satisfies this)."""

    id: str
    inputs: dict[str, Tensor]
    #: names of the outputs the client asked for; ``None`` means all of them.
    requested_outputs: list[str] | None
    parameters: Parameters
    #: Set only for requests to decoupled models: every response goes through it (and
    #: whatever ``execute`` returns for such a request is ignored). See ``ResponseSender``.
    respond: ResponseSender | None

    @property
    def trace(self) -> RequestTrace | None:
        """The request's trace when it is traced."""
        ...


@dataclass(slots=True)
class ExecResult:
    """The outcome of one request: its outputs, or the error that failed it alone."""

    outputs: list[Tensor] = field(default_factory=list)
    error: WorkbenchError | None = None
    parameters: Parameters = field(default_factory=dict)
    #: The model answered with an error *response* (rather than failing to execute): Triton's
    #: python backend still reports such a request as a success in the statistics.
    error_is_response: bool = False


def fail_all(count: int, error: WorkbenchError) -> list[ExecResult]:
    """One failed result per request: a batch-wide error fails every request in it."""
    return [ExecResult(error=error) for _ in range(count)]


#: ``respond(result, final)`` sends one response of a decoupled request from any thread.
#: ``result`` may be ``None`` when ``final`` is True (Triton's "complete, no response" flag).
#: Exactly one call has ``final=True``; it ends the request's stream.
ResponseSender = Callable[[ExecResult | None, bool], None]


class InferenceClient(Protocol):
    """What a model may call back into the server with (Python backend BLS)."""

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
        """Run an inference on this server from a worker thread; raises ``WorkbenchError``.

        ``trace``: the calling request's trace; the inference is then traced as its child.
        ``request_id``: the BLS request's own id (``InferenceRequest(request_id=...)``), which
        the called model sees and its trace names; Triton does not inherit the caller's."""
        ...

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
        """Every response of a request, as ``(result, final)``, from a worker thread
        (``trace`` and ``request_id`` as for ``infer_sync``).

        For ``exec(decoupled=True)``: several responses for a decoupled model, one for any
        other. The last has ``final`` set; a final result with no outputs is Triton's "complete,
        no response" flag. A failure (refused request or model error) is a final result with
        ``error`` set: this iterator never raises ``WorkbenchError``.
        """
        ...

    def is_model_ready(self, model_name: str, model_version: int = -1) -> bool: ...


@dataclass(slots=True)
class InstanceContext:
    """Everything a backend needs to create one model instance."""

    model_name: str
    model_version: int
    config: ModelConfig
    #: ``<repository>/<model>``
    model_path: Path
    #: ``<repository>/<model>/<version>``
    version_path: Path
    #: Triton's instance name, e.g. ``add_sub_0_0`` (``<group name>_<index>``).
    instance_name: str
    #: ``KIND_CPU``, ``KIND_GPU`` or ``KIND_MODEL``
    kind: str = "KIND_CPU"
    device_id: int = 0
    #: set by the core so that python models can issue BLS requests
    client: InferenceClient | None = None
    #: the server's exit deadline: bounds ``close`` during the exit, ends processes past it
    exit_deadline: ExitDeadline = field(default_factory=ExitDeadline)
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class ModelInstance(Protocol):
    """A loaded copy of a model; ``execute`` is called from one worker at a time."""

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Return exactly one result per request, in order."""
        ...

    def close(self) -> None:
        """Release the instance (``finalize`` for python models)."""
        ...


@runtime_checkable
class LoopModelInstance(ModelInstance, Protocol):
    """An instance the core may drive from its event loop, without a worker thread: one whose
    work happens in another process it talks to (the python backend's stubs).

    ``start_execute`` is tried first (no task, no future per call); when it declines,
    ``execute_async`` is awaited. Both return one result per request, in order, like
    ``execute``, which the core runs on the instance's own thread when neither can (a
    decoupled model, a stub restarting): this instance never starts a thread for that.
    """

    def start_execute(
        self, requests: Sequence[ExecRequest], on_done: Callable[[list[ExecResult]], None]
    ) -> bool:
        """Send ``requests`` now; ``on_done(results)`` runs on the loop when they are answered.
        False when this path cannot take the call (nothing was sent)."""
        ...

    async def execute_async(self, requests: Sequence[ExecRequest]) -> list[ExecResult] | None:
        """``execute``, awaited on the loop; None when it cannot run from the loop now
        (nothing was sent: the core calls ``execute`` on the instance's thread)."""
        ...


class Backend(Protocol):
    """A backend: ``python``, ``onnxruntime``, ``pytorch``, ``tensorrt``."""

    #: the ``backend`` name in config.pbtxt
    name: str
    #: file inside a version folder when ``default_model_filename`` is unset
    default_model_filename: str

    def auto_complete(self, config: ModelConfig, model_path: Path, version_path: Path) -> None:
        """Fill in what Triton's auto-complete would for this backend (in place)."""
        ...

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        """Load the model for one instance; raise ``WorkbenchError`` with a clear reason."""
        ...
