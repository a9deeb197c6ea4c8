"""Triton's raw binary request: ``Inference-Header-Content-Length: 0``, body = the one input.

The input's name, type and shape come from the model configuration, as Triton's core does in
``InferenceRequest::Normalize`` (triton-inference-server/core): a batching model gets batch 1,
at most one variable-size dimension is deduced from the byte size, and BYTES inputs must have
shape ``[1]``. Every output comes back in binary form.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput

from workbench._types import Tensor
from workbench.config.dtypes import ELEMENT_SIZE, config_to_wire
from workbench.core.request import InferRequest
from workbench.errors import InvalidArgumentError
from workbench.server.tensor_bytes import (
    deserialize_bytes,
    request_prefix,
    tensor_from_buffer,
)

_WILDCARD = -1
#: Triton names the input ``raw_input`` until the core resolves it; its errors say so.
RAW_INPUT = "raw_input"
_PREFIX = request_prefix("")


def decode_raw_request(
    body: bytes | bytearray | memoryview, model_name: str, model_version: str, config: ModelConfig
) -> InferRequest:
    """The request a raw binary body stands for (outputs: all of them, in binary)."""
    if len(config.input) != 1:
        raise InvalidArgumentError(
            f"{_PREFIX}Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config.input)} inputs in '{model_name}' model configuration"
        )
    spec = config.input[0]
    datatype = config_to_wire(spec.data_type)
    view = memoryview(body)
    shape = _deduce_shape(spec, datatype, len(view), config.max_batch_size > 0)
    if datatype == "BYTES":
        # The body is the element itself; Triton prepends its length indicator.
        framed = len(view).to_bytes(4, "little") + bytes(view)
        array = deserialize_bytes(memoryview(framed), shape, _PREFIX, RAW_INPUT, model_name)
    else:
        array = tensor_from_buffer(view, datatype, shape, _PREFIX, RAW_INPUT, model_name)
    request = InferRequest(model_name=model_name, model_version=model_version)
    request.inputs[spec.name] = Tensor(spec.name, datatype, array)
    return request


def _deduce_shape(
    spec: ModelInput, datatype: str, byte_size: int, batching: bool
) -> tuple[int, ...]:
    shape = [1] if batching else []
    dynamic_axis = -1
    fixed_count = 1
    for dim in spec.dims:
        if dim == _WILDCARD:
            if dynamic_axis != -1:
                raise InvalidArgumentError(
                    f"{_PREFIX}The shape of the raw input '{spec.name}' can not be deduced "
                    "because there are more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
        else:
            fixed_count *= dim
        shape.append(dim)
    if datatype == "BYTES":
        if dynamic_axis != -1 or fixed_count != 1:
            raise InvalidArgumentError(
                f"{_PREFIX}For BYTE datatype raw input '{spec.name}', the model must have input "
                "shape [1]"
            )
    elif dynamic_axis != -1:
        element_bytes = fixed_count * ELEMENT_SIZE[datatype]
        shape[dynamic_axis] = byte_size // element_bytes if element_bytes else 0
    return tuple(shape)


__all__ = ["decode_raw_request"]
