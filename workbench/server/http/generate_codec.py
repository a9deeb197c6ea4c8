"""JSON of Triton's generate extension: request body -> ``InferRequest``, response -> body.

Follows ``HTTPAPIServer::HandleGenerate`` and ``GenerateRequestClass`` in Triton 2.51's
``src/http_server.cc`` (the protocol: ``docs/protocol/extension_generate.md``):

- Request: every top-level key that names a model input (model *metadata*, so a batching
  model's shape starts with -1) becomes that input; ``parameters`` is a nested object converted
  the same way; every other key, ``id`` included, becomes a request parameter (string, int,
  bool or double). A value is a scalar or a list; its shape is the input's metadata shape with
  the top-level element count spread over it (innermost ``-1`` takes the rest, other ``-1`` 1).
- Response: one flat object of ``id`` (when set), ``model_name``, ``model_version``, the
  response parameters and one key per output, keys in byte order (Triton keeps them in a
  ``std::map``); an output of one element is written as a scalar, others as a flat list.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench._types import Parameters, Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InternalError, InvalidArgumentError, UnsupportedError, WorkbenchError
from workbench.server.http import _json
from workbench.server.http._json import NON_STRING, access_error
from workbench.server.http.request_codec import flatten_json, json_array
from workbench.server.http.response_codec import json_data
from workbench.server.tensor_bytes import deserialize_bytes, request_prefix, serialize_bytes

#: The one key Triton's generate request schema maps to a nested object.
PARAMETERS = "parameters"
_INT64 = range(-(1 << 63), 1 << 63)

#: ``{input name: {"name", "datatype", "shape"}}`` from the model metadata
InputMetadata = dict[str, dict[str, Any]]


def input_metadata(metadata: dict[str, Any]) -> InputMetadata:
    """The inputs of a model metadata document (``InferenceCore.model_metadata``) by name."""
    return {spec["name"]: spec for spec in metadata["inputs"]}


def decode_generate_request(
    body: bytes | bytearray | memoryview, model_name: str, model_version: str, inputs: InputMetadata
) -> InferRequest:
    """The inference request a generate body stands for (every output, as JSON)."""
    document = _json.loads(body)
    request = InferRequest(model_name=model_name, model_version=model_version)
    if isinstance(document, dict) and "id" in document:
        if not isinstance(document["id"], str):
            raise access_error("id", NON_STRING)
        request.id = document["id"]
    if not isinstance(document, dict):
        raise InternalError("attempt to get members for non-object")
    for key, value in document.items():
        if key == PARAMETERS:
            _convert_nested(value, inputs, request)
        else:
            _convert_member(key, value, inputs, request)
    return request


def _convert_nested(value: Any, inputs: InputMetadata, request: InferRequest) -> None:
    if PARAMETERS in inputs:
        raise InvalidArgumentError(
            f"Keyword '{PARAMETERS}' for nested schema also given as input tensor name"
        )
    if not isinstance(value, dict):
        raise InternalError(
            f"Expected JSON object for keyword: '{PARAMETERS}': attempt to access JSON "
            "non-object as object"
        )
    try:
        for key, member in value.items():
            _convert_member(key, member, inputs, request)
    except WorkbenchError as exc:
        raise type(exc)(f"Converting keyword: '{PARAMETERS}': {exc.message}") from None


def _convert_member(key: str, value: Any, inputs: InputMetadata, request: InferRequest) -> None:
    spec = inputs.get(key)
    if spec is None:
        request.parameters[key] = _parameter(key, value)
    else:
        request.inputs[key] = _input_tensor(key, value, spec, request)


def _parameter(key: str, value: Any) -> str | int | bool | float:
    if isinstance(value, str | bool | float):
        return value
    if isinstance(value, int):
        return value if value in _INT64 else float(value)  # not an int64: a double in Triton
    raise InvalidArgumentError(
        f"parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
    )


def _input_tensor(name: str, value: Any, spec: dict[str, Any], request: InferRequest) -> Tensor:
    datatype: str = spec["datatype"]
    data = value if isinstance(value, list) else [value]
    if datatype == "BYTES":
        flat = flatten_json(data)
        if not all(isinstance(item, str) for item in flat):
            raise InternalError(
                "Unable to parse JSON bytes array: attempt to access JSON non-string as string"
            )
        shape = _spread_shape(name, len(data), spec["shape"])
        array = _bytes_array(flat, shape, name, request)
    else:
        shape = _spread_shape(name, len(data), spec["shape"])
        array = json_array(data, datatype, shape, name)
    return Tensor(name, datatype, array)


def _spread_shape(name: str, count: int, dims: list[int]) -> tuple[int, ...]:
    """Triton's two passes: fixed dims divide ``count``; the innermost -1 takes the rest."""
    shape = list(dims)
    for dim in reversed(shape):
        if dim != -1:
            if dim <= 0 or count % dim:
                raise _no_shape(name)
            count //= dim
    for index in reversed(range(len(shape))):
        if shape[index] == -1:
            shape[index], count = count, 1
    if count != 1:
        raise _no_shape(name)
    return tuple(shape)


def _no_shape(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"The schema can not convert input '{name}' to tensor with proper shape"
    )


def _bytes_array(
    flat: list[str], shape: tuple[int, ...], name: str, request: InferRequest
) -> np.ndarray:
    """Strings -> BYTES array; a nested list whose leaves do not fit fails as in Triton's core."""
    items = np.empty(len(flat), dtype=np.object_)
    items[:] = [item.encode("utf-8") for item in flat]
    if len(flat) == math.prod(shape):
        return items.reshape(shape)
    framed = memoryview(serialize_bytes(items))
    prefix = request_prefix(request.id)
    return deserialize_bytes(framed, shape, prefix, name, request.model_name)


def encode_generate_response(response: InferResponse) -> bytes:
    """The JSON object Triton's generate endpoints answer for one response."""
    members: dict[str, Any] = {}
    if response.id:
        members["id"] = response.id
    members["model_name"] = response.model_name
    members["model_version"] = str(response.model_version)
    _add_parameters(members, response.parameters)
    for tensor in response.outputs:
        if tensor.name not in members:  # Triton's std::map::emplace keeps the first
            members[tensor.name] = _output_value(tensor)
    return _json.dumps({key: members[key] for key in sorted(members)})


def _add_parameters(members: dict[str, Any], parameters: Parameters) -> None:
    for key, value in parameters.items():
        if isinstance(value, bytes | bytearray):
            raise UnsupportedError(
                f"Response parameter '{key}' has type 'TRITONSERVER_PARAMETER_BYTES' which is "
                "not currently supported"
            )
        members.setdefault(key, value)


def _output_value(tensor: Tensor) -> Any:
    values = json_data(tensor)
    return values[0] if math.prod(tensor.shape) == 1 else values


__all__ = [
    "PARAMETERS",
    "InputMetadata",
    "decode_generate_request",
    "encode_generate_response",
    "input_metadata",
]
