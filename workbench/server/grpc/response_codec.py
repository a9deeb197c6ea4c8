"""Encode an ``InferResponse`` as a ``ModelInferResponse``.

As Triton 2.51 does (``InferResponseCompleteCommon`` in ``src/grpc/infer_handler.h``): every
output's data goes to ``raw_output_contents`` (the typed ``contents`` are never used in
responses), response parameters become ``InferParameter`` values, and a response larger than
the message limit is an ``INVALID_ARGUMENT`` error rather than a transport failure. An output
written into shared memory keeps its entry and gets empty raw contents (Triton's allocator
adds one for every output, ``ResponseAllocatorHelper`` in ``infer_handler.cc``).

``serialize_response`` gives the same message's bytes with each output's data copied once
(``serialize_response_parts``, not at all: the parts, for a server that sends them unjoined):
protobuf would copy a ``bytes`` value when it is set (``bytes(buffer)``, then into its own
memory) and again when serialising. ``raw_output_contents`` is the message's last field (6), so
the message without it, then each output's field written here, are the bytes protobuf writes.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from tritonclient.grpc.service_pb2 import InferParameter, ModelInferResponse

from workbench._types import Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError
from workbench.memo import remember
from workbench.server.grpc.parameters import to_infer_parameter
from workbench.server.tensor_bytes import tensor_buffer

#: Triton's ``MAX_GRPC_MESSAGE_SIZE`` (``INT32_MAX``).
MAX_MESSAGE_BYTES = 2**31 - 1
FINAL_RESPONSE = "triton_final_response"
#: ``raw_output_contents``: field 6, length-delimited
_RAW_OUTPUT_TAG = b"\x32"
#: a serialised response smaller than this is joined into one ``bytes``
JOIN_BELOW = 64 * 1024


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
    message, buffers = _without_contents(response, request, in_regions)
    for buffer in buffers:
        message.raw_output_contents.append(bytes(buffer))
    if sum(len(buffer) for buffer in buffers) > limit - (1 << 20):
        _check_size(message.ByteSize(), limit)
    return message


def serialize_response(
    response: InferResponse,
    request: InferRequest | None = None,
    limit: int = MAX_MESSAGE_BYTES,
    in_regions: Collection[str] = (),
) -> bytes:
    """``encode_response(...).SerializeToString()``, each output's data copied once (into the
    returned bytes)."""
    serialized = serialize_response_parts(response, request, limit, in_regions)
    return serialized if isinstance(serialized, bytes) else b"".join(serialized)


def serialize_response_parts(
    response: InferResponse,
    request: InferRequest | None = None,
    limit: int = MAX_MESSAGE_BYTES,
    in_regions: Collection[str] = (),
) -> bytes | list[Any]:
    """``serialize_response``'s bytes, or, when they reach ``JOIN_BELOW``, their parts in order
    (the message without contents, then each output's field key and length and its data, a
    view of the output): a server that can send parts (the native front end) copies no
    output; joining them is ``serialize_response``'s one copy.

    The bytes around the outputs' data are the same for every response of a model with the
    same id, outputs, shapes and data lengths (and no parameters): they are serialised once
    and remembered (``_FRAMES``)."""
    outputs, buffers = _outputs(response, request, in_regions)
    key: tuple[Any, ...] | None = None
    frame = None
    if not response.parameters:
        fields: list[Any] = [response.model_name, response.model_version, response.id]
        for tensor, buffer in zip(outputs, buffers, strict=True):
            fields += (tensor.name, tensor.datatype, tensor.array.shape, len(buffer))
        key = tuple(fields)
        frame = _FRAMES.get(key)
    if frame is None:
        frame = _frame(_message(response, outputs).SerializeToString(), buffers)
        if key is not None:
            remember(_FRAMES, key, frame)
    pieces, size = frame
    size += sum(len(buffer) for buffer in buffers)
    _check_size(size, limit)
    if not buffers:
        return pieces[0]
    parts: list[Any] = []
    for piece, buffer in zip(pieces, buffers, strict=True):
        parts += (piece, buffer)
    return b"".join(parts) if size < JOIN_BELOW else parts


#: (model, version, id, then name, datatype, shape, data length of each output) -> its frame
_FRAMES: dict[tuple[Any, ...], tuple[tuple[bytes, ...], int]] = {}


def _frame(header: bytes, buffers: list[Any]) -> tuple[tuple[bytes, ...], int]:
    """The bytes before each output's data (the message without contents, then its field's
    key and length; the others' key and length) and their total length."""
    pieces = [_RAW_OUTPUT_TAG + _varint(len(buffer)) for buffer in buffers] or [b""]
    pieces[0] = header + pieces[0]
    return tuple(pieces), sum(len(piece) for piece in pieces)


def _without_contents(
    response: InferResponse, request: InferRequest | None, in_regions: Collection[str]
) -> tuple[ModelInferResponse, list[Any]]:
    """The message with its outputs listed but no ``raw_output_contents``, and the buffer each
    output's contents would be (empty for an output already written into its region)."""
    outputs, buffers = _outputs(response, request, in_regions)
    return _message(response, outputs), buffers


def _outputs(
    response: InferResponse, request: InferRequest | None, in_regions: Collection[str]
) -> tuple[list[Tensor], list[Any]]:
    """The outputs to answer with (those the request asked for, when it is given) and the
    buffer of each one's contents (empty for one already written into its region)."""
    wanted = request.requested_outputs if request is not None else None
    outputs = response.outputs
    if wanted is not None:
        outputs = [tensor for tensor in outputs if tensor.name in wanted]
    buffers = [
        b"" if tensor.name in in_regions else tensor_buffer(tensor.array, tensor.datatype)
        for tensor in outputs
    ]
    return outputs, buffers


def _message(response: InferResponse, outputs: list[Tensor]) -> ModelInferResponse:
    """The message with ``outputs`` listed but no ``raw_output_contents``."""
    message = ModelInferResponse(
        model_name=response.model_name,
        model_version=str(response.model_version),
        id=response.id,
    )
    for key, value in response.parameters.items():
        message.parameters[key].CopyFrom(to_infer_parameter(value))
    for tensor in outputs:
        output = message.outputs.add(name=tensor.name, datatype=tensor.datatype)
        output.shape.extend(tensor.shape)
    return message


def _check_size(size: int, limit: int) -> None:
    if size > limit:
        raise InvalidArgumentError(
            f"Response has byte size {size} which exceeds gRPC's byte size limit {limit}."
        )


def _varint(value: int) -> bytes:
    """``value`` as a protobuf base-128 varint."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def set_final(message: ModelInferResponse, final: bool) -> ModelInferResponse:
    """Mark a streamed response as its request's last one (or not), as Triton does."""
    message.parameters[FINAL_RESPONSE].CopyFrom(InferParameter(bool_param=final))
    return message


__all__ = [
    "FINAL_RESPONSE",
    "MAX_MESSAGE_BYTES",
    "encode_response",
    "serialize_response",
    "serialize_response_parts",
    "set_final",
]
