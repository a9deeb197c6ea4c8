"""Encode an ``InferResponse`` as Triton's HTTP response body.

Outputs go as JSON ``data`` or, when asked for (per-output ``binary_data``, or the request's
``binary_data_output`` for outputs it does not list), as binary data after the JSON header, with
``parameters.binary_data_size`` per output and the header length in
``Inference-Header-Content-Length``. Follows ``InferRequestClass::FinalizeResponse`` in
Triton 2.51's ``src/http_server.cc``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench._types import Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError
from workbench.server.http import _json
from workbench.server.tensor_bytes import as_bytes, tensor_buffer


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
    header: dict[str, Any] = {}
    if response.id:
        header["id"] = response.id
    header["model_name"] = response.model_name
    header["model_version"] = str(response.model_version)
    if response.parameters:
        header["parameters"] = response.parameters
    outputs: list[dict[str, Any]] = []
    buffers: list[bytes | memoryview] = []
    for tensor in response.outputs:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
        }
        if output_is_binary(tensor.name, request, binary_default):
            buffer = tensor_buffer(tensor.array, tensor.datatype)
            entry["parameters"] = {"binary_data_size": len(buffer)}
            if len(buffer):
                buffers.append(buffer)
        else:
            entry["data"] = json_data(tensor)
        outputs.append(entry)
    header["outputs"] = outputs
    head = _json.dumps(header)
    if not buffers:
        return head, None
    return b"".join([head, *buffers]), len(head)


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


__all__ = ["encode_infer_response", "json_data", "output_is_binary"]
