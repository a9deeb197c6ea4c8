"""Encode an ``InferResponse`` as Triton's HTTP response body.

Outputs go as JSON ``data`` or, when asked for (per-output ``binary_data``, or the request's
``binary_data_output`` for outputs it does not list), as binary data after the JSON header, with
``parameters.binary_data_size`` per output and the header length in
``Inference-Header-Content-Length``. An output written into shared memory is listed with its
name, datatype and shape only. Follows ``InferRequestClass::FinalizeResponse`` in Triton 2.51's
``src/http_server.cc``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench._types import Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError
from workbench.memo import remember
from workbench.server.http import _json
from workbench.server.http.replies import JOIN_BELOW
from workbench.server.tensor_bytes import as_bytes, tensor_buffer

#: JSON headers of binary responses by what they say; only short ones (``memo.LIMIT`` at most)
_CACHED_HEAD_BYTES = 4096
_heads: dict[tuple[Any, ...], bytes] = {}


def output_is_binary(name: str, request: InferRequest, binary_default: bool) -> bool:
    """An output listed in the request follows its own ``binary_data`` (default false)."""
    params = request.output_parameters.get(name)
    if params is None:
        return binary_default
    return bool(params.get("binary_data", False))


def encode_infer_response(
    response: InferResponse, request: InferRequest, binary_default: bool
) -> tuple[bytes, int | None]:
    """The response body and, when it carries binary data, the JSON header's length."""
    parts = infer_response_parts(response, request, binary_default)
    if len(parts) == 1:
        return parts[0], None
    return b"".join(parts), len(parts[0])


def infer_response_parts(
    response: InferResponse, request: InferRequest, binary_default: bool
) -> list[Any]:
    """The response body in parts: the JSON header (bytes), then each binary output's buffer
    as the output holds it (no copy)."""
    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name
    header["model_version"] = str(response.model_version)
    if response.parameters:
        header["parameters"] = response.parameters
    outputs: list[dict[str, Any]] = []
    parts: list[bytes | memoryview] = [b""]  # the JSON header goes first, once written
    in_regions = request.shared_memory.outputs if request.shared_memory is not None else {}
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.array.shape),
        }
        if tensor.name in in_regions:
            pass  # already written into its region
        elif output_is_binary(tensor.name, request, binary_default):
            buffer = tensor_buffer(tensor.array, tensor.datatype)
            entry["parameters"] = {"binary_data_size": len(buffer)}
            if len(buffer):
                parts.append(buffer)
        else:
            entry["data"] = json_data(tensor)
        outputs.append(entry)
    header["outputs"] = outputs
    parts[0] = _json.dumps(header)
    return parts


def encode_binary_response(
    response: InferResponse, request: InferRequest, binary_default: bool
) -> tuple[bytes | list[Any], int | None] | None:
    """``encode_infer_response`` for the usual response, or ``None`` for any other.

    Usual: no response parameters, every output fixed-size and asked for in binary, none asked
    for as classes (the caller classifies first when this says ``None``). Its JSON header is
    the same for every response of the same outputs, so it is written once and remembered.
    A body of ``JOIN_BELOW`` bytes or more comes as its parts (the header, then each output's
    buffer, read in place), for the connection to send without joining them (issue #12).
    """
    if response.parameters:
        return None
    listed = request.output_parameters
    key: list[Any] = [response.id, response.model_name, response.model_version]
    parts: list[bytes | memoryview] = [b""]  # the JSON header goes first
    for tensor in response.outputs:
        params = listed.get(tensor.name)
        if not (binary_default if params is None else params.get("binary_data", False)):
            return None
        if tensor.datatype == "BYTES" or (params and params.get("classification")):
            return None
        try:
            buffer = tensor_buffer(tensor.array, tensor.datatype)
        except Exception:  # noqa: BLE001 - the general path raises it, after classifying
            return None
        key += (tensor.name, tensor.datatype, tensor.array.shape, len(buffer))
        if len(buffer):
            parts.append(buffer)
    head = _heads.get(tuple(key))
    if head is None:  # the header alone: joining the outputs to it would copy them
        head = _remember_head(tuple(key), infer_response_parts(response, request, binary_default))
    if len(parts) == 1:
        return head, None
    parts[0] = head
    return reply_body(parts)


def reply_body(parts: list[Any]) -> tuple[bytes | list[Any], int | None]:
    """A reply body from ``infer_response_parts``: one buffer, or (``JOIN_BELOW`` bytes or
    more) the parts themselves, for the connection to send without joining them; and the JSON
    header's length when there is binary data."""
    if len(parts) == 1:
        return parts[0], None
    if sum(map(len, parts)) >= JOIN_BELOW:
        return parts, len(parts[0])
    return b"".join(parts), len(parts[0])


def _remember_head(key: tuple[Any, ...], parts: list[Any]) -> bytes:
    head: bytes = parts[0]
    if len(head) <= _CACHED_HEAD_BYTES:
        remember(_heads, key, head)
    return head


def json_data(tensor: Tensor) -> list[Any]:
    """An output's values as a flat JSON list (Triton always writes outputs flat)."""
    if tensor.datatype in ("FP16", "BF16"):
        raise InvalidArgumentError(
            f"sending {tensor.datatype} data via JSON is not supported. Please use the binary "
            "data format for output"
        )
    flat = np.asarray(tensor.array).reshape(-1)
    if tensor.datatype == "BYTES":
        return [as_bytes(item).decode("utf-8", "replace") for item in flat]
    values: list[Any] = flat.tolist()
    return values


__all__ = [
    "encode_binary_response",
    "encode_infer_response",
    "infer_response_parts",
    "json_data",
    "output_is_binary",
    "reply_body",
]
