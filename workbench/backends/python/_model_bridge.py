"""Conversions between the core's tensors/requests and ``pb_utils`` objects, and BLS."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from workbench._types import Parameters, Tensor
from workbench.backends._batching import make_tensor
from workbench.backends.base import ExecRequest, ExecResult, InferenceClient, RequestTrace
from workbench.backends.python import pb_utils
from workbench.backends.python._wire_shm import Part
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.errors import (
    AlreadyExistsError,
    CancelledError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    UnsupportedError,
    WorkbenchError,
)

#: ``TritonError`` code -> the matching error category
_ERRORS: dict[int, type[WorkbenchError]] = {
    pb_utils.TritonError.UNKNOWN: WorkbenchError,
    pb_utils.TritonError.INTERNAL: InternalError,
    pb_utils.TritonError.NOT_FOUND: NotFoundError,
    pb_utils.TritonError.INVALID_ARG: InvalidArgumentError,
    pb_utils.TritonError.UNAVAILABLE: UnavailableError,
    pb_utils.TritonError.UNSUPPORTED: UnsupportedError,
    pb_utils.TritonError.ALREADY_EXISTS: AlreadyExistsError,
    pb_utils.TritonError.CANCELLED: CancelledError,
}

#: ``TRITONSERVER_TYPE_BF16``
_BF16 = 14
#: numeric wire type -> its numpy dtype: an output already of its declared one of these is
#: passed on as it is (the usual case, without ``make_tensor``'s conversions)
_NUMERIC = {wire: dt for wire, dt in WIRE_TO_NUMPY.items() if wire not in ("BYTES", "BF16")}

#: KServe request parameters that Triton turns into request fields, not ``parameters()``
_RESERVED = {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout"}


def to_workbench_error(error: pb_utils.TritonError) -> WorkbenchError:
    """The library error for a ``TritonError`` set on a response."""
    return _ERRORS.get(error.code(), WorkbenchError)(error.message())


def to_triton_error(error: WorkbenchError) -> pb_utils.TritonError:
    """The ``TritonError`` a BLS response carries for a library error."""
    code = getattr(pb_utils.TritonError, error.code, pb_utils.TritonError.UNKNOWN)
    return pb_utils.TritonError(error.message, code)


def to_pb_tensor(tensor: Tensor) -> pb_utils.Tensor:
    """A model-facing tensor sharing the array of a wire tensor."""
    return pb_utils.Tensor._from_wire(tensor.name, tensor.datatype, tensor.array)


def to_pb_request(request: ExecRequest, all_outputs: Sequence[str]) -> pb_utils.InferenceRequest:
    """The ``pb_utils.InferenceRequest`` that ``execute`` receives for a core request."""
    from_wire = pb_utils.Tensor._from_wire
    inputs = [from_wire(t.name, t.datatype, t.array) for t in request.inputs.values()]
    return pb_request(
        request.id,
        inputs,
        request.requested_outputs,
        request.parameters,
        all_outputs,
        request.trace,
    )


def pb_request(
    request_id: str,
    inputs: list[pb_utils.Tensor],
    requested_outputs: list[str] | None,
    params: Parameters,
    all_outputs: Sequence[str],
    trace: RequestTrace | None = None,
) -> pb_utils.InferenceRequest:
    """The ``pb_utils.InferenceRequest`` of a request's parts (the stub has no core request)."""
    # Triton's core fills in every output when the client names none.
    requested = list(requested_outputs or all_outputs)
    if not params:  # the common case: nothing to check or filter
        return pb_utils.InferenceRequest._received(request_id, inputs, requested, trace)
    flags = 0
    if params.get("sequence_start"):
        flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    if params.get("sequence_end"):
        flags |= pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END
    return pb_utils.InferenceRequest(
        request_id=request_id,
        correlation_id=params.get("sequence_id", 0),
        inputs=inputs,
        requested_output_names=requested,
        flags=flags,
        timeout=int(params.get("timeout", 0)),
        trace=pb_utils.InferenceTrace._of(trace),
        parameters={k: v for k, v in params.items() if k not in _RESERVED},
    )


def to_result(
    response: Any, request: ExecRequest, declared: dict[str, str], model: str
) -> ExecResult:
    """The core's result for the ``InferenceResponse`` a model produced for ``request``."""
    failed = failed_result(response, model)
    if failed is not None:
        return failed
    requested = request.requested_outputs  # None: every output (``_batching.wanted``)
    outputs = [
        Tensor(*output_part(tensor, declared.get(tensor._name)))
        for tensor in response.output_tensors()
        if requested is None or tensor._name in requested
    ]
    return ExecResult(outputs, None, dict(response._parameters))


def failed_result(response: Any, model: str) -> ExecResult | None:
    """The result of a response that is not one, or that carries an error; None otherwise."""
    if not isinstance(response, pb_utils.InferenceResponse):
        return ExecResult(
            error=InternalError(
                f"Failed to process the request(s) for model '{model}', message: Expected an "
                "'InferenceResponse' object in the execute function return list, found type "
                f"'{type(response).__name__}'."
            )
        )
    if response._error is not None:
        return ExecResult(error=to_workbench_error(response._error), error_is_response=True)
    return None


def output_part(tensor: pb_utils.Tensor, declared: str | None) -> Part:
    """An output as (name, wire datatype, array), converted to its ``declared`` type."""
    if declared is not None and tensor._dtype != _BF16:
        plain = _NUMERIC.get(declared)
        if plain is not None and tensor._array.dtype == plain:
            return tensor._name, declared, tensor._array
    wire = tensor._wire_type()
    if wire == "BF16" or (declared == "BF16" and wire == "UINT16"):
        return tensor._name, "BF16", tensor._array
    converted = make_tensor(tensor._name, tensor._array, declared)
    return converted.name, converted.datatype, converted.array


def run_bls(client: InferenceClient, request: pb_utils.InferenceRequest) -> Any:
    """Run a BLS request through ``client``; failures come back as a response error."""
    try:
        outputs = client.infer_sync(*_call_arguments(request), **_call_options(request))
    except WorkbenchError as exc:
        return pb_utils.InferenceResponse(error=to_triton_error(exc))
    return pb_utils.InferenceResponse([to_pb_tensor(t) for t in outputs])


def run_bls_stream(
    client: InferenceClient, request: pb_utils.InferenceRequest
) -> pb_utils.ResponseIterator:
    """Start a decoupled BLS call; its responses as they come (it waits for the first, so
    that the call is under way when ``exec`` returns, as in Triton)."""
    results = client.infer_stream_sync(*_call_arguments(request), **_call_options(request))
    responses = (_bls_response(result) for result, _ in results)
    first = next(responses, None)
    return pb_utils.ResponseIterator(itertools.chain([first] if first else [], responses))


def _bls_response(result: ExecResult) -> pb_utils.InferenceResponse:
    if result.error is not None:
        return pb_utils.InferenceResponse(error=to_triton_error(result.error))
    return pb_utils.InferenceResponse(
        [to_pb_tensor(t) for t in result.outputs], parameters=result.parameters
    )


def _call_arguments(request: pb_utils.InferenceRequest) -> tuple[str, list[Tensor]]:
    """A BLS request's model name and inputs, as ``InferenceClient`` takes them."""
    inputs = [Tensor(t.name(), t._wire_type(), t._array) for t in request.inputs()]
    return request.model_name, inputs


def _call_options(request: pb_utils.InferenceRequest) -> dict[str, Any]:
    """A BLS request's keyword arguments for ``InferenceClient``."""
    timeout_us = request.timeout()
    return {
        "model_version": request.model_version,
        "requested_outputs": request.requested_output_names() or None,
        "parameters": dict(request._parameters),
        "timeout_s": timeout_us / 1e6 if timeout_us else None,
        "trace": request._trace,
        "request_id": request.request_id(),
    }
