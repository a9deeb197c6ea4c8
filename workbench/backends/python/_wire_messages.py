"""The messages between the server and a stub process, with their tensors in shared memory.

Every message is ``(kind, key, *payload)``; replies are ``(REPLY, key of the call, ...)``.

server -> stub: ``INIT`` (what to load), ``EXECUTE`` (requests), ``FINALIZE``, and the
replies to the stub's ``BLS``/``READY`` calls.
stub -> server: replies to those, ``RESPONSE`` (one response of a decoupled request, any
time), ``BLS``, ``BLS_STREAM`` and ``READY`` (calls into the server), ``LOG`` (a forwarded
log record), ``METRICS`` (custom metric operations, usually in the same write as a reply).

A request of ``EXECUTE`` carries its trace id (0 when untraced) and a ``BLS``/``BLS_STREAM``
call the id of the request whose ``trace()`` it was given: the server traces the call as that
request's child (``TraceTable``).

A message names a block of shared memory and carries each tensor's name, datatype, shape and
offset there; a message whose tensors come to 4 KiB or less has no block and carries their
bytes instead (see ``_wire_shm``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench import errors
from workbench._types import Parameters, Tensor
from workbench.backends.base import (
    ExecRequest,
    ExecResult,
    RequestTrace,
    ResponseSender,
    TraceRef,
)
from workbench.backends.python._wire_shm import BlockWriter, Region, TensorDesc, read_block

# Message kinds: small ints, which pickle and compare faster than names.
INIT = 0
EXECUTE = 1
FINALIZE = 2
REPLY = 3
RESPONSE = 4
#: a BLS call: ``(BLS, key, block, model name, version, descs, requested outputs,
#: parameters, timeout_s, trace id: 0 when untraced, request id)``, as ``BLS_STREAM``
BLS = 5
READY = 6
LOG = 7
METRICS = 8
#: a decoupled BLS call (``exec(decoupled=True)``): its responses come back as
#: ``(REPLY, (key, n), error, block, descs, parameters, final)`` for n = 0, 1, ...
BLS_STREAM = 9

#: an error as it crosses: (class name in ``workbench.errors``, message), or None
ErrorWire = tuple[str, str] | None
#: a result: (error, outputs, parameters, whether the error is the model's response)
ResultWire = tuple[ErrorWire, list[TensorDesc], Parameters, bool]
#: a request's trace: its id (0 when untraced), or (id, OpenTelemetry context)
TraceWire = int | tuple[int, str]
#: a request: (token, id, requested outputs, parameters, inputs, trace)
RequestWire = tuple[int, str, list[str] | None, Parameters, list[TensorDesc], TraceWire]
#: the traces of the requests sent to one stub, by id: a BLS call naming one of them (its
#: ``trace=request.trace()``) is traced as its child
TraceTable = dict[int, RequestTrace]


@dataclass(slots=True)
class StubRequest:
    """An ``ExecRequest`` rebuilt in the stub process."""

    id: str
    inputs: dict[str, Tensor]
    requested_outputs: list[str] | None
    parameters: Parameters
    respond: ResponseSender | None = None
    #: the server's handle on the request (decoupled responses name it)
    token: int = 0
    trace: TraceRef | None = None


def error_to_wire(error: BaseException | None) -> ErrorWire:
    if error is None:
        return None
    if isinstance(error, errors.WorkbenchError):
        return (type(error).__name__, error.message)
    return ("InternalError", f"{type(error).__name__}: {error}")


def error_from_wire(wire: ErrorWire) -> errors.WorkbenchError | None:
    """The library error for a wire error (its category kept, extra attributes not)."""
    if wire is None:
        return None
    name, message = wire
    cls = getattr(errors, name, errors.WorkbenchError)
    if not (isinstance(cls, type) and issubclass(cls, errors.WorkbenchError)):
        cls = errors.WorkbenchError
    error = cls.__new__(cls)
    errors.WorkbenchError.__init__(error, message)
    return error


def _split(descs: list[TensorDesc], counts: list[int]) -> list[list[TensorDesc]]:
    parts, start = [], 0
    for count in counts:
        parts.append(descs[start : start + count])
        start += count
    return parts


def write_requests(
    writer: BlockWriter,
    requests: Sequence[ExecRequest],
    tokens: Sequence[int],
    traces: TraceTable,
    share: bool = False,
) -> tuple[int, list[RequestWire]]:
    """Put the inputs of ``requests`` into one block; the block and each request's wire form.

    The traces of traced requests go into ``traces`` (the caller forgets them once answered).
    ``share``: the stub can map the server's shared buffers, so an input lying in one (a large
    request body) is referred to, not copied (the request outlives the stub's read of it)."""
    if len(requests) == 1:  # the common case, without the splitting
        request = requests[0]
        block, descs = writer.write(list(request.inputs.values()), share)
        wire = (tokens[0], request.id, request.requested_outputs, request.parameters, descs)
        return block, [(*wire, _trace_id(request, traces))]
    inputs = [list(request.inputs.values()) for request in requests]
    block, descs = writer.write([tensor for tensors in inputs for tensor in tensors], share)
    wires: list[RequestWire] = [
        (
            token,
            request.id,
            request.requested_outputs,
            request.parameters,
            part,
            _trace_id(request, traces),
        )
        for token, request, part in zip(
            tokens, requests, _split(descs, [len(t) for t in inputs]), strict=True
        )
    ]
    return block, wires


def _trace_id(request: ExecRequest, traces: TraceTable) -> TraceWire:
    """The id the stub knows ``request``'s trace by (0: untraced, the one check it costs),
    with its OpenTelemetry context when it has one."""
    trace = request.trace
    if trace is None:
        return 0
    traces[trace.id] = trace
    context = trace.get_context()
    return trace.id if context is None else (trace.id, context)


def trace_ref(wire: TraceWire) -> TraceRef | None:
    """The trace a stub's request carries, from its wire form."""
    if isinstance(wire, tuple):
        return TraceRef(wire[0], wire[1])
    return TraceRef(wire) if wire else None


def read_requests(region: Region, block: int, wires: list[RequestWire]) -> list[StubRequest]:
    """The requests of an ``EXECUTE`` message (see ``read_block`` for when the block is freed)."""
    if len(wires) == 1:  # the common case, without the splitting
        token, request_id, requested, parameters, descs, trace_id = wires[0]
        inputs = {tensor.name: tensor for tensor in read_block(region, block, descs)}
        trace = trace_ref(trace_id)
        return [StubRequest(request_id, inputs, requested, parameters, None, token, trace)]
    tensors = read_block(region, block, [desc for wire in wires for desc in wire[4]])
    requests, start = [], 0
    for token, request_id, requested, parameters, descs, trace_id in wires:
        inputs = {tensor.name: tensor for tensor in tensors[start : start + len(descs)]}
        start += len(descs)
        request = StubRequest(request_id, inputs, requested, parameters, token=token)
        request.trace = trace_ref(trace_id)
        requests.append(request)
    return requests


def write_results(
    writer: BlockWriter, results: Sequence[ExecResult | None]
) -> tuple[int, list[ResultWire | None]]:
    """Put the outputs of ``results`` into one block; the block and each result's wire form."""
    if len(results) == 1 and results[0] is not None:  # the common case, without the splitting
        result = results[0]
        block, descs = writer.write(result.outputs)
        error = None if result.error is None else error_to_wire(result.error)
        return block, [(error, descs, result.parameters, result.error_is_response)]
    outputs = [result.outputs if result is not None else [] for result in results]
    block, descs = writer.write([tensor for tensors in outputs for tensor in tensors])
    wires: list[ResultWire | None] = [
        None
        if result is None
        else (error_to_wire(result.error), part, result.parameters, result.error_is_response)
        for result, part in zip(results, _split(descs, [len(o) for o in outputs]), strict=True)
    ]
    return block, wires


def read_results(
    region: Region, block: int, wires: Sequence[ResultWire | None]
) -> list[ExecResult | None]:
    """The results of a message (see ``read_block`` for when the block is freed)."""
    if len(wires) == 1 and wires[0] is not None:  # the common case, without the splitting
        error, descs, parameters, is_response = wires[0]
        outputs = read_block(region, block, descs)
        failure = None if error is None else error_from_wire(error)
        return [ExecResult(outputs, failure, parameters, is_response)]
    descs = [desc for wire in wires if wire is not None for desc in wire[1]]
    tensors = read_block(region, block, descs)
    results: list[ExecResult | None] = []
    start = 0
    for wire in wires:
        if wire is None:
            results.append(None)
            continue
        error, part, parameters, is_response = wire
        outputs = tensors[start : start + len(part)]
        start += len(part)
        results.append(ExecResult(outputs, error_from_wire(error), parameters, is_response))
    return results
