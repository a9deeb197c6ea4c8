"""Encode an ``InferResponse`` as a ``ModelInferResponse``.

As Triton 2.51 does (``InferResponseCompleteCommon`` in ``src/grpc/infer_handler.h``): every
output's data goes to ``raw_output_contents`` (the typed ``contents`` are never used in
responses), response parameters become ``InferParameter`` values, and a response larger than
the message limit is an ``INVALID_ARGUMENT`` error rather than a transport failure. An output
written into shared memory keeps its entry and gets empty raw contents (Triton's allocator
adds one for every output, ``ResponseAllocatorHelper`` in ``infer_handler.cc``).
"""

from __future__ import annotations

from collections.abc import Collection

from tritonclient.grpc.service_pb2 import InferParameter, ModelInferResponse

from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError
from workbench.server.grpc.parameters import to_infer_parameter
from workbench.server.tensor_bytes import tensor_buffer

#: Triton's ``MAX_GRPC_MESSAGE_SIZE`` (``INT32_MAX``).
MAX_MESSAGE_BYTES = 2**31 - 1
FINAL_RESPONSE = "triton_final_response"


def encode_response(
    response: InferResponse,
    request: InferRequest | None = None,
    limit: int = MAX_MESSAGE_BYTES,
    in_regions: Collection[str] = (),
) -> ModelInferResponse:
    """The gRPC message for ``response``.

    ``request``: when given with requested outputs, only those are kept (a decoupled model's
    responses are not filtered by the core). ``in_regions``: the outputs already written into
    shared memory.
    """
    message = ModelInferResponse(
        model_name=response.model_name,
        model_version=str(response.model_version),
        id=response.id,
    )
    for key, value in response.parameters.items():
        message.parameters[key].CopyFrom(to_infer_parameter(value))
    wanted = request.requested_outputs if request is not None else None
    size = 0
    for tensor in response.outputs:
        if wanted is not None and tensor.name not in wanted:
            continue
        output = message.outputs.add(name=tensor.name, datatype=tensor.datatype)
        output.shape.extend(tensor.shape)
        if tensor.name in in_regions:
            message.raw_output_contents.append(b"")  # already written into its region
            continue
        buffer = tensor_buffer(tensor.array, tensor.datatype)
        size += len(buffer)
        message.raw_output_contents.append(bytes(buffer))
    if size > limit - (1 << 20) and message.ByteSize() > limit:
        raise InvalidArgumentError(
            f"Response has byte size {message.ByteSize()} which exceeds gRPC's byte size limit "
            f"{limit}."
        )
    return message


def set_final(message: ModelInferResponse, final: bool) -> ModelInferResponse:
    """Mark a streamed response as its request's last one (or not), as Triton does."""
    message.parameters[FINAL_RESPONSE].CopyFrom(InferParameter(bool_param=final))
    return message


__all__ = ["FINAL_RESPONSE", "MAX_MESSAGE_BYTES", "encode_response", "set_final"]
