"""Decode a KServe v2 HTTP infer request into an ``InferRequest``.

Three body layouts, as Triton 2.51 accepts them (``HTTPAPIServer::EVBufferToInput`` and
``ParseJsonTritonIO`` in ``src/http_server.cc``):

- JSON only: every input carries ``data`` (flat or nested lists; BYTES as strings).
- Binary tensor extension: ``Inference-Header-Content-Length`` bytes of JSON, then the raw
  bytes of each input that has ``parameters.binary_data_size``, in input order.
- Raw binary (header length 0): the whole body is the one input of a one-input model.

An input may instead name a registered shared-memory region (``shared_memory_region`` in its
parameters), and an output the region it is to be written into (``shared_memory.py``).

Tensor bytes become numpy arrays with ``numpy.frombuffer`` over the request body or the
region's mapping: no copies.
Error texts and categories are Triton's, so clients see the same messages.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from workbench._types import Parameters, Tensor, serialize_bytes
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.core.request import DeferredInput, InferRequest
from workbench.errors import InternalError, InvalidArgumentError
from workbench.server.http import _json
from workbench.server.http._json import NON_ARRAY, NON_BOOL, NON_STRING, NON_UINT, access_error
from workbench.server.http.request_plan import Body, cached_plan, make_plan, remember_plan
from workbench.server.http.shared_memory import REGION, check_output, output_memory, tensor_memory
from workbench.server.shared_memory import SharedMemoryRegistry
from workbench.server.tensor_bytes import (
    MAX_DIMS,
    MAX_ELEMENTS,
    deserialize_bytes,
    request_prefix,
    shape_fits,
    tensor_from_buffer,
)

_RESERVED_PREFIX = "triton_"
#: the array of an input the core refuses (see ``DeferredInput``)
_EMPTY = np.empty(0, dtype=np.uint8)
_LEADING_INTEGER = re.compile(rb"[ \t\n\v\f\r]*([+-]?)([0-9]+)")
_TYPED_PARAMETERS = {
    "sequence_start": (bool, NON_BOOL),
    "sequence_end": (bool, NON_BOOL),
    "priority": (int, NON_UINT),
    "timeout": (int, NON_UINT),
    "binary_data_output": (bool, NON_BOOL),
}


def parse_header_length(value: bytes | None, content_length: int) -> int | None:
    """The ``Inference-Header-Content-Length`` header; ``None`` when absent (all JSON).

    Read with C's ``atoi``, as Triton does (``GetInferenceHeaderLength``): text that is not a
    number is 0, the raw binary layout, and ``12abc`` is 12.
    """
    if value is None:
        return None
    if value.isdigit() and int(value) <= content_length:
        return int(value)  # the usual case, without decoding the text
    text = value.decode("latin-1").strip()
    length = _atoi(value)
    if length < 0 or length > content_length:
        raise InvalidArgumentError(
            f"inference header size should be in range (0, {content_length}), got: {text}"
        )
    return length


def _atoi(value: bytes) -> int:
    """glibc's ``atoi`` (``(int) strtol(value, NULL, 10)``): leading blanks, a sign, then the
    digits up to the first other byte, 0 when there are none; clamped to a 64-bit long, then
    cut to 32 bits."""
    match = _LEADING_INTEGER.match(value)
    if match is None:
        return 0
    digits = match[2].lstrip(b"0")
    number = int(digits or b"0") if len(digits) < 20 else 2**63  # int() has a digit limit
    number = min(-number if match[1] == b"-" else number, 2**63 - 1)
    return (max(number, -(2**63)) + 2**31) % 2**32 - 2**31


def decode_infer_request(
    body: Body,
    header_length: int | None,
    model_name: str,
    model_version: str = "",
    regions: SharedMemoryRegistry | None = None,
) -> tuple[InferRequest, bool]:
    """Decode a JSON (or JSON + binary) infer request.

    Returns the request and whether outputs not listed in ``outputs`` are returned as binary
    (the ``binary_data_output`` request parameter). Tensors in shared memory use ``regions``
    (none found without it); the request's ``shared_memory`` then holds them in use until the
    caller releases it.
    """
    if header_length is None:
        view = memoryview(body)
        document = _json.loads(view)
        return _decode_document(document, view, len(view), model_name, model_version, regions)
    header = bytes(body[:header_length])
    plan = cached_plan(header)
    document = None
    if plan is None:
        document = _json.loads(header)
        plan = make_plan(document)
        if plan is not None:
            remember_plan(header, plan)
    request = None if plan is None else plan.request(body, header_length, model_name, model_version)
    if request is not None:
        return request, False
    if document is None:
        document = _json.loads(header)
    view = memoryview(body)
    return _decode_document(document, view, header_length, model_name, model_version, regions)


def _decode_document(
    document: Any,
    view: memoryview,
    end: int,
    model_name: str,
    model_version: str,
    regions: SharedMemoryRegistry | None = None,
) -> tuple[InferRequest, bool]:
    """The full decoder: every field checked, Triton's error texts."""
    if not isinstance(document, dict):
        raise access_error("inputs", "", member="inputs")
    request = InferRequest(model_name=model_name, model_version=model_version)
    try:
        request.id = _request_id(document)
        request.parameters, binary_default = _request_parameters(document)
        offset = _decode_inputs(document, view, end, request, regions)
        if offset != len(view):
            raise InvalidArgumentError(f"unexpected additional input data for model '{model_name}'")
        _decode_outputs(document, request, regions)
    except BaseException:
        if request.shared_memory is not None:
            request.shared_memory.release()  # a refused request uses no region
        raise
    return request, binary_default


def _request_id(document: dict[str, Any]) -> str:
    value = document.get("id", "")
    if not isinstance(value, str):
        raise access_error("id", NON_STRING)
    return value


def _request_parameters(document: dict[str, Any]) -> tuple[Parameters, bool]:
    params = document.get("parameters")
    if params is None:
        return {}, False
    if not isinstance(params, dict):
        raise InternalError("failed to get request params.: attempt to get members for non-object")
    for key, value in params.items():
        _check_parameter(key, value)
    binary_default = bool(params.pop("binary_data_output", False))
    return params, binary_default


def _check_parameter(key: str, value: Any) -> None:
    if key == "sequence_id":
        if not (isinstance(value, str) or _is_uint(value)):
            raise access_error("sequence_id", NON_STRING)
    elif key in _TYPED_PARAMETERS:
        kind, expected = _TYPED_PARAMETERS[key]
        ok = isinstance(value, bool) if kind is bool else _is_uint(value)
        if not ok:
            raise access_error(key, expected)
    elif key.startswith(_RESERVED_PREFIX):
        raise InvalidArgumentError(
            "parameter keys starting with 'triton_' are reserved for Triton usage and should "
            "not be specified."
        )
    elif not isinstance(value, str | int | float):  # bool is an int
        raise InvalidArgumentError(
            f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
        )


def _is_uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _decode_inputs(
    document: dict[str, Any],
    view: memoryview,
    offset: int,
    req: InferRequest,
    regions: SharedMemoryRegistry | None,
) -> int:
    """Add each input to ``req``; returns the body offset after the last binary input."""
    if "inputs" not in document:
        raise access_error("inputs", "", member="inputs")
    inputs = document["inputs"]
    if not isinstance(inputs, list):
        raise access_error("inputs", NON_ARRAY)
    for spec in inputs:
        if not isinstance(spec, dict):
            _check_content_fields({}, {})  # Triton finds none of the three in a non-object
        tensor, offset = _decode_input(spec, view, offset, req, regions)
        if tensor.name in req.inputs:  # Triton's core refuses it when it adds the input
            raise InvalidArgumentError(
                f"{request_prefix(req.id)}input '{tensor.name}' already exists in request"
            )
        req.inputs[tensor.name] = tensor
    return offset


def _decode_input(
    spec: dict[str, Any],
    view: memoryview,
    offset: int,
    req: InferRequest,
    regions: SharedMemoryRegistry | None,
) -> tuple[Tensor, int]:
    params = spec.get("parameters")
    if not isinstance(params, dict):
        params = {}  # Triton looks for its keys in an object only: anything else has none
    _check_content_fields(spec, params)
    name = _string_member(spec, "name")
    datatype = _string_member(spec, "datatype")
    shape = _shape(spec)
    tensor = Tensor(name, datatype, _EMPTY, params)
    if REGION in params:
        return _binary_tensor(tensor_memory(params, req, regions), tensor, shape, req), offset
    if "binary_data_size" in params:
        size = params["binary_data_size"]
        if not _is_uint(size):
            raise access_error("binary_data_size", NON_UINT)
        available = len(view) - offset
        if size > available:
            raise InvalidArgumentError(
                f"unexpected size for input '{name}', expecting {size - available} additional "
                f"bytes for model '{req.model_name}'"
            )
        return _binary_tensor(view[offset : offset + size], tensor, shape, req), offset + size
    return _json_tensor(spec.get("data"), tensor, shape, req), offset


def _binary_tensor(
    chunk: memoryview, tensor: Tensor, shape: tuple[int, ...], req: InferRequest
) -> Tensor:
    """The input's array over its bytes; one that does not fit is left to the core."""
    error = None
    if tensor.datatype in WIRE_TO_NUMPY and shape_fits(shape):
        try:
            tensor.array = _binary_array(chunk, tensor.datatype, shape, tensor.name, req)
            return tensor
        except InvalidArgumentError as exc:
            error = exc
    return _deferred(tensor, DeferredInput(shape, len(chunk), error), req)


def _json_tensor(data: Any, tensor: Tensor, shape: tuple[int, ...], req: InferRequest) -> Tensor:
    """The input's JSON ``data`` as an array. Triton reads none for a shape without elements
    (``GetElementCount`` is 0 for no dims), and counts BYTES elements in its core."""
    name, datatype = tensor.name, tensor.datatype
    count = math.prod(shape) if shape else 0
    if count == 0:
        if datatype in WIRE_TO_NUMPY and shape and shape_fits(shape):
            tensor.array = np.empty(shape, dtype=WIRE_TO_NUMPY[datatype])
            return tensor
        return _deferred(tensor, DeferredInput(shape, 0), req)
    if datatype not in WIRE_TO_NUMPY:
        raise InvalidArgumentError(f"invalid datatype for input {name}")
    if datatype == "BYTES":
        return _json_strings(data, tensor, shape, req)
    if shape_fits(shape):
        tensor.array = json_array(data, datatype, shape, name)
        return tensor
    if not 0 < count <= MAX_ELEMENTS:  # Triton would try to allocate it (and abort)
        raise _unholdable_shape(shape, name, req.model_name)
    array = json_array(data, datatype, (count,), name)  # more dims than numpy has
    return _deferred(tensor, DeferredInput(shape, array.nbytes), req)


def _json_strings(data: Any, tensor: Tensor, shape: tuple[int, ...], req: InferRequest) -> Tensor:
    if not isinstance(data, list):
        raise access_error("data", NON_ARRAY)
    flat = flatten_json(data)
    if not all(isinstance(item, str) for item in flat):
        raise InternalError(
            f"Unable to parse JSON bytes array: attempt to access JSON {NON_STRING}"
        )
    array = _json_bytes(flat)
    count = math.prod(shape)
    if len(flat) == count and shape_fits(shape):
        tensor.array = array.reshape(shape)
        return tensor
    where = f"inference input '{tensor.name}' for model '{req.model_name}'"
    if len(flat) > count:  # Triton's core stops at the first element past the count
        message = f"unexpected number of string elements {max(count, 0) + 1} for {where}, "
        message += f"expecting {count}"
    else:
        message = f"expected {count} string elements for {where}, got {len(flat)}"
    error = InvalidArgumentError(request_prefix(req.id) + message)
    return _deferred(tensor, DeferredInput(shape, len(serialize_bytes(array)), error), req)


def _deferred(tensor: Tensor, deferred: DeferredInput, req: InferRequest) -> Tensor:
    """An empty tensor the core refuses, checking its shape first (see ``DeferredInput``)."""
    inputs = req.deferred_inputs = req.deferred_inputs or {}
    inputs[tensor.name] = deferred
    if tensor.datatype not in WIRE_TO_NUMPY:
        tensor.datatype = "<invalid>"  # Triton's name for it; the core refuses the type
    return tensor


def _check_content_fields(spec: dict[str, Any], params: dict[str, Any]) -> None:
    """Exactly one of ``data``, ``binary_data_size``, ``shared_memory_region`` (Triton's text)."""
    if ("data" in spec) + ("binary_data_size" in params) + ("shared_memory_region" in params) == 1:
        return  # the usual case, checked without building the message's parts
    present = [
        label
        for label, found in (
            ("'data'", "data" in spec),
            ("'binary_data_size'", "binary_data_size" in params),
            ("'shared_memory_region'", "shared_memory_region" in params),
        )
        if found
    ]
    detail = " no field is set" if not present else " set " + " ".join(present)
    raise InvalidArgumentError(
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But" + detail
    )


def _string_member(obj: dict[str, Any], key: str) -> str:
    if key not in obj:
        raise access_error(key, "", member=key)
    value = obj[key]
    if not isinstance(value, str):
        raise access_error(key, NON_STRING)
    return value


def _shape(spec: dict[str, Any]) -> tuple[int, ...]:
    if "shape" not in spec:
        raise access_error("shape", "", member="shape")
    shape = spec["shape"]
    if not isinstance(shape, list):
        raise access_error("shape", NON_ARRAY)
    for dim in shape:
        if type(dim) is not int or not 0 <= dim < 2**64:  # JSON has no int subclass but bool
            raise access_error("shape", NON_UINT)
    if shape and max(shape) >= 2**63:  # read as uint64, kept as int64: the top half wraps
        return tuple(dim - 2**64 if dim >= 2**63 else dim for dim in shape)
    return tuple(shape)


def _unholdable_shape(shape: tuple[int, ...], name: str, model: str) -> InvalidArgumentError:
    """A shape numpy cannot make an array of (Triton would pass it on to the model, whose
    configuration cannot allow it either)."""
    return InvalidArgumentError(
        f"unexpected shape {list(shape)} for input '{name}' for model '{model}': a tensor has "
        f"at most {MAX_DIMS} dimensions and fewer than 2^60 elements"
    )


def _binary_array(
    chunk: memoryview, datatype: str, shape: tuple[int, ...], name: str, req: InferRequest
) -> np.ndarray:
    if datatype == "BYTES":
        return deserialize_bytes(chunk, shape, request_prefix(req.id), name, req.model_name)
    dtype = WIRE_TO_NUMPY[datatype]
    if len(chunk) == math.prod(shape) * dtype.itemsize:  # the usual case, without the message
        return np.frombuffer(chunk, dtype=dtype).reshape(shape)
    return tensor_from_buffer(chunk, datatype, shape, request_prefix(req.id), name, req.model_name)


def json_array(data: Any, datatype: str, shape: tuple[int, ...], name: str) -> np.ndarray:
    """An input's JSON ``data`` (a list, any nesting) as an array of ``shape``; Triton's errors."""
    count = math.prod(shape)
    if count == 0:
        return np.empty(shape, dtype=WIRE_TO_NUMPY[datatype])
    if datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data "
            f"format for input {name}"
        )
    if not isinstance(data, list):
        raise access_error("data", NON_ARRAY)
    flat = flatten_json(data)
    if len(flat) != count:
        raise InternalError(
            "Unable to parse 'data': Shape does not match true shape of 'data' field"
        )
    if datatype == "BYTES":
        return _json_bytes(flat).reshape(shape)
    return _json_numbers(flat, datatype).reshape(shape)


def flatten_json(data: list[Any]) -> list[Any]:
    """Nested lists -> one flat list (Triton accepts any nesting whose leaf count matches)."""
    if not any(isinstance(item, list) for item in data):
        return data
    flat: list[Any] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _json_bytes(flat: list[Any]) -> np.ndarray:
    if not all(isinstance(item, str) for item in flat):
        raise access_error("data", NON_STRING)
    array = np.empty(len(flat), dtype=np.object_)
    # surrogateescape: the bytes of a body that is not UTF-8 (see ``_json.loads``) come back
    array[:] = [item.encode("utf-8", errors="surrogateescape") for item in flat]
    return array


#: numpy kinds a JSON array may hold for each target kind (bool: only true/false)
_ACCEPTED_KINDS = {"b": "b", "u": "iu", "i": "iu", "f": "iuf"}
_KIND_ERRORS = {"b": NON_BOOL, "u": NON_UINT, "i": "non-signed-integer as signed-integer"}


def _parse_numbers(flat: list[Any], dtype: np.dtype) -> np.ndarray:
    try:
        if dtype.kind == "u" and all(type(v) is int and v >= 0 for v in flat):
            # numpy would turn ints above 2**63 into float64 and lose UINT64 precision.
            return np.asarray(flat, dtype=np.uint64)
        return np.asarray(flat)
    except (ValueError, OverflowError):
        return np.asarray(flat, dtype=np.object_)


def _json_numbers(flat: list[Any], datatype: str) -> np.ndarray:
    dtype = WIRE_TO_NUMPY[datatype]
    parsed = _parse_numbers(flat, dtype)
    ok = parsed.dtype.kind in _ACCEPTED_KINDS[dtype.kind]
    if ok and dtype.kind == "u" and parsed.dtype.kind == "i":
        ok = bool((parsed >= 0).all())
    if not ok:
        expected = _KIND_ERRORS.get(dtype.kind, "non-number as double")
        raise InternalError(f"Unable to parse 'data': attempt to access JSON {expected}")
    # Triton narrows integers without a range check (C casts); so does astype.
    return parsed.astype(dtype, copy=False)


def _decode_outputs(
    document: dict[str, Any], req: InferRequest, regions: SharedMemoryRegistry | None
) -> None:
    if "outputs" not in document:
        return
    outputs = document["outputs"]
    if not isinstance(outputs, list):
        raise access_error("outputs", NON_ARRAY)
    names: list[str] = []
    for spec in outputs:
        if not isinstance(spec, dict):  # TritonJson finds no member in a non-object
            raise access_error("name", "", member="name")
        params = spec.get("parameters")
        if not isinstance(params, dict):
            params = {}  # as for inputs: Triton finds no parameter in a non-object
        name = _string_member(spec, "name")
        _check_output_parameters(params)
        memory = output_memory(params, req, regions) if REGION in params else None
        if name in req.output_parameters:
            continue  # Triton keeps the first of an output named twice, and answers it once
        names.append(name)
        req.output_parameters[name] = params
        if memory is not None and req.shared_memory is not None:
            req.shared_memory.outputs[name] = memory
    req.requested_outputs = names


def _check_output_parameters(params: dict[str, Any]) -> None:
    if REGION in params:
        check_output(params)
    if "classification" in params and not _is_uint(params["classification"]):
        raise InternalError(
            "Unable to set 'classification': attempt to access JSON non-unsigned-integer as "
            "unsigned-integer"
        )
    if "binary_data" in params and not isinstance(params["binary_data"], bool):
        raise access_error("binary_data", NON_BOOL)


__all__ = ["decode_infer_request", "flatten_json", "json_array", "parse_header_length"]
