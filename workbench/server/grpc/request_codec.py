"""Decode a ``ModelInferRequest`` into the protocol-neutral ``InferRequest``.

Follows ``InferGRPCToInput`` and ``InferAllocatorPayload`` (``src/grpc/infer_handler.cc``,
``infer_handler.h``) of Triton 2.51: an input's data comes from its typed ``contents`` or, in
input order, from ``raw_input_contents`` (never both in one request), or from a registered
shared-memory region, and tensor bytes become numpy arrays over the request's own buffers or
the region's mapping (``numpy.frombuffer``, no copy). Byte-size and BYTES errors come from the
same helpers as the HTTP side, so the texts are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
from tritonclient.grpc.service_pb2 import InferTensorContents, ModelInferRequest

from workbench._types import Parameters, Tensor, serialize_bytes
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.core.request import DeferredInput, InferRequest
from workbench.errors import InvalidArgumentError
from workbench.server.grpc.parameters import RequestParameters, request_parameters
from workbench.server.grpc.shared_memory import output_memory, shared_memory_region, tensor_memory
from workbench.server.shared_memory import SharedMemoryRegistry
from workbench.server.tensor_bytes import (
    deserialize_bytes,
    request_prefix,
    shape_fits,
    tensor_from_buffer,
)

#: ``ModelInferRequest.InferInputTensor`` / ``InferRequestedOutputTensor`` (untyped messages)
InputTensor: TypeAlias = Any
OutputTensor: TypeAlias = Any

#: typed ``contents`` field -> (the datatype it carries, numpy type its values arrive as)
_CONTENT_FIELDS: dict[str, tuple[str, Any]] = {
    "bool_contents": ("BOOL", np.bool_),
    "int_contents": ("INT32", np.int32),
    "int64_contents": ("INT64", np.int64),
    "uint_contents": ("UINT32", np.uint32),
    "uint64_contents": ("UINT64", np.uint64),
    "fp32_contents": ("FP32", np.float32),
    "fp64_contents": ("FP64", np.float64),
    "bytes_contents": ("BYTES", np.object_),
}
#: 8- and 16-bit integers travel in the 32-bit fields; Triton keeps their low bytes.
_NARROW = {"INT8": "int_contents", "INT16": "int_contents"}
_NARROW.update({"UINT8": "uint_contents", "UINT16": "uint_contents"})


def decode_request(
    message: ModelInferRequest,
    version: str,
    regions: SharedMemoryRegistry | None = None,
    raw: Sequence[bytes | memoryview] | None = None,
) -> tuple[InferRequest, RequestParameters]:
    """The core's request for ``message`` (``version`` already checked) and its parameters.

    Tensors in shared memory use ``regions`` (none found without it); the request's
    ``shared_memory`` then holds them in use until the caller releases it. ``raw``: the raw
    input contents when they were cut out of the message (``raw_inputs.py``).
    """
    params = request_parameters(message.parameters)
    request = InferRequest(
        model_name=message.model_name,
        model_version=version,
        id=message.id,
        parameters=params.values,
    )
    try:
        _decode_inputs(
            message, request, regions, message.raw_input_contents if raw is None else raw
        )
        _decode_outputs(message, request, regions)
    except BaseException:
        if request.shared_memory is not None:
            request.shared_memory.release()  # a refused request uses no region
        raise
    return request, params


def _decode_inputs(
    message: ModelInferRequest,
    request: InferRequest,
    regions: SharedMemoryRegistry | None,
    raw: Sequence[bytes | memoryview],
) -> None:
    next_raw = 0
    for spec in message.inputs:
        if spec.name in request.inputs:
            raise InvalidArgumentError(
                f"{request_prefix(request.id)}input '{spec.name}' already exists in request"
            )
        region = shared_memory_region(spec)
        if region is not None:
            if spec.HasField("contents"):
                raise InvalidArgumentError(
                    "unexpected 'content' provided when using shared memory for input tensor "
                    f"'{spec.name}' for model '{message.model_name}'"
                )
            array = _raw_array(tensor_memory(spec, region, request, regions), spec, request)
        elif spec.HasField("contents"):
            if raw:
                raise InvalidArgumentError(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{spec.name}' for model '{message.model_name}'"
                )
            array = _typed_array(spec, request)
        elif next_raw < len(raw):
            array = _raw_array(memoryview(raw[next_raw]), spec, request)
            next_raw += 1
        else:
            raise InvalidArgumentError(
                f"unable to find data for input tensor '{spec.name}' for model "
                f"'{message.model_name}' in request."
            )
        request.inputs[spec.name] = Tensor(spec.name, _datatype(spec), array)


def _datatype(spec: InputTensor) -> str:
    # An unknown type reaches the core as Triton's "<invalid>", which the core rejects with
    # Triton's own text ("data-type is '<invalid>', but model ... expects ...").
    return spec.datatype if spec.datatype in WIRE_TO_NUMPY else "<invalid>"


def _raw_array(chunk: memoryview, spec: InputTensor, request: InferRequest) -> np.ndarray:
    datatype, shape = _datatype(spec), tuple(spec.shape)
    prefix = request_prefix(request.id)
    if datatype == "<invalid>":
        return np.empty(0, dtype=np.uint8)
    error = None
    if shape_fits(shape):  # else negative dims, or more than numpy can hold
        try:
            if datatype == "BYTES":
                return deserialize_bytes(chunk, shape, prefix, spec.name, request.model_name)
            return tensor_from_buffer(chunk, datatype, shape, prefix, spec.name, request.model_name)
        except InvalidArgumentError as exc:
            error = exc
    # The core refuses it, checking the shape first as Triton's does (see DeferredInput).
    deferred = request.deferred_inputs = request.deferred_inputs or {}
    deferred[spec.name] = DeferredInput(shape, len(chunk), error)
    return np.empty(0, dtype=np.uint8 if datatype == "BYTES" else WIRE_TO_NUMPY[datatype])


def _typed_array(spec: InputTensor, request: InferRequest) -> np.ndarray:
    """The one non-empty typed field of ``contents`` as an array of the input's shape."""
    contents: InferTensorContents = spec.contents
    datatype = _datatype(spec)
    found: tuple[str, Any] | None = None
    for field, (carried, numpy_type) in _CONTENT_FIELDS.items():
        values = getattr(contents, field)
        if not values:
            continue
        if _NARROW.get(datatype) == field:
            carried = datatype
        _check_field(spec, request.model_name, carried, datatype, found is not None)
        found = (carried, np.asarray(values, dtype=numpy_type))
    if datatype == "<invalid>":
        return np.empty(0, dtype=np.uint8)
    if found is None:
        found = (datatype, np.empty(0, dtype=WIRE_TO_NUMPY[datatype]))
    return _as_input(found[1], datatype, spec, request)


def _check_field(
    spec: InputTensor, model: str, carried: str, datatype: str, already_set: bool
) -> None:
    if already_set:
        raise InvalidArgumentError(
            f"unexpected explicit tensor data for input tensor '{spec.name}' for model "
            f"'{model}', binary data was already supplied."
        )
    if carried != datatype:
        raise InvalidArgumentError(
            f"unexpected explicit tensor data for input tensor '{spec.name}' for model "
            f"'{model}' of type '{carried}', expected datatype '{datatype}'"
        )


def _as_input(
    values: np.ndarray, datatype: str, spec: InputTensor, request: InferRequest
) -> np.ndarray:
    """Typed values -> the input's array, with the byte-size checks of raw data."""
    if datatype == "BYTES":
        return _raw_array(memoryview(serialize_bytes(values)), spec, request)
    dtype = WIRE_TO_NUMPY[datatype]
    if values.dtype != dtype:
        values = values.astype(dtype)  # INT8/INT16/UINT8/UINT16: the low bytes, as in C
    chunk = np.ascontiguousarray(values).data.cast("B")
    return _raw_array(chunk, spec, request)


def _decode_outputs(
    message: ModelInferRequest, request: InferRequest, regions: SharedMemoryRegistry | None
) -> None:
    if not message.outputs:
        return
    names: list[str] = []
    for spec in message.outputs:
        params, region = _output_parameters(spec)
        memory = None if region is None else output_memory(spec, region, request, regions)
        if spec.name in names:
            continue  # Triton's core keeps a set of them: a name asked twice answers once
        names.append(spec.name)
        if params:
            request.output_parameters[spec.name] = params
        if memory is not None and request.shared_memory is not None:
            request.shared_memory.outputs[spec.name] = memory
    request.requested_outputs = names


def _output_parameters(spec: OutputTensor) -> tuple[Parameters, str | None]:
    """``classification`` of one requested output, and the region it is to be written into."""
    region = shared_memory_region(spec)
    count = 0
    if "classification" in spec.parameters:
        param = spec.parameters["classification"]
        if param.WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgumentError(
                "invalid value type for 'classification' parameter, expected int64_param"
            )
        count = param.int64_param
        if count <= 0:
            raise InvalidArgumentError(
                "invalid value for 'classification' parameter, expected >= 0"
            )
    if region is not None and count:
        raise InvalidArgumentError(
            "output can't set both 'shared_memory_region' and 'classification'"
        )
    return ({"classification": count} if count else {}), region


__all__ = ["decode_request"]
