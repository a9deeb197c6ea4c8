"""A large ``ModelInferRequest`` read with its ``raw_input_contents`` left in grpc's bytes.

protobuf's parse copies every ``bytes`` field into the message, and each read of the field
copies it again (issue #17: two copies of every input tensor). ``ModelInfer``'s deserializer
therefore walks the top-level fields of a large message itself (the protobuf wire format: a
varint key, then a varint, 8 bytes, 4 bytes, or a varint length and that many bytes), cuts out
each ``raw_input_contents`` (field 7 of ``ModelInferRequest`` in Triton's
``grpc_service.proto``) as a ``memoryview`` of the received bytes, and parses the rest, which
is small. The decoder's numpy arrays then view the bytes grpc received (read-only).

A message the walk cannot follow (a group, a length past the end) is parsed whole, so that
protobuf alone decides whether it is valid (``unparsable.py`` answers it if not). A smaller
message is walked only to make its ``request_plan.Layout``, which later messages of the same
layout reuse without a walk or a parse; else (its length's layout is in use) it is parsed
whole, since its copies cost less than the walk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from tritonclient.grpc.service_pb2 import ModelInferRequest

from workbench.server.grpc.request_plan import LAYOUTS, Layout, views_of

_RAW_FIELD = ModelInferRequest.DESCRIPTOR.fields_by_name["raw_input_contents"].number
#: the key of a ``raw_input_contents`` entry: its field number, wire type 2 (length-delimited)
_RAW_KEY = _RAW_FIELD << 3 | 2
_WALK_FROM = 64 * 1024
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
#: a field's key (its number and wire type) takes at most 5 bytes in protobuf's parser
_MAX_KEY_BYTES = 5


class ReceivedInfer(NamedTuple):
    """A ``ModelInferRequest`` as received: the message, and its raw input contents in order
    (views of the received bytes when they were cut out, else the message's own field)."""

    message: ModelInferRequest
    raw: Sequence[bytes | memoryview]
    #: the received bytes and their layout, when the message has one (``request_plan.py``)
    data: bytes = b""
    layout: Layout | None = None


def parse_infer_request(data: bytes) -> ReceivedInfer:
    """``ModelInferRequest.FromString(data)``, the raw input contents left in ``data``; raises
    protobuf's ``DecodeError`` as that would. A message of a layout seen before is not parsed
    again (``request_plan.py``)."""
    if type(data) is bytes:  # not a shared buffer's mapping
        layout = LAYOUTS.find(data)
        if layout is not None:
            return ReceivedInfer(layout.message, layout.views(data), data, layout)
        if LAYOUTS.wanted(len(data)):
            split = _split(data)
            if split is None:
                return _whole(data)
            rest, spans = split
            message = ModelInferRequest.FromString(rest)
            layout = LAYOUTS.add(data, spans, message)
            if layout is None:  # too much outside its tensors to remember
                return ReceivedInfer(message, views_of(data, spans))
            return ReceivedInfer(message, layout.views(data), data, layout)
    split = _split(data) if len(data) >= _WALK_FROM else None
    if split is None or not split[1]:
        return _whole(data)
    rest, spans = split
    return ReceivedInfer(ModelInferRequest.FromString(rest), views_of(data, spans))


def _whole(data: bytes) -> ReceivedInfer:
    message = ModelInferRequest.FromString(data)
    return ReceivedInfer(message, message.raw_input_contents)


def _split(data: bytes) -> tuple[bytes, list[tuple[int, int]]] | None:
    """The message without its ``raw_input_contents``, and where those fields' values lie
    (offset, length; none when it has none); ``None`` when the message's framing is not one
    the walk follows (protobuf then judges it whole)."""
    view = memoryview(data)
    kept: list[memoryview] = []
    raw: list[tuple[int, int]] = []
    at, kept_from, end = 0, 0, len(data)
    while at < end:
        start = at
        key, at = _varint(data, at)
        if at - start > _MAX_KEY_BYTES:
            return None  # protobuf (upb) refuses a key this long; cut out, it would pass
        wire_type = key & 7
        if wire_type == _LENGTH_DELIMITED:
            length, at = _varint(data, at)
            if key == _RAW_KEY and at + length <= end:
                kept.append(view[kept_from:start])
                raw.append((at, length))
                kept_from = at + length
            at += length
        elif wire_type == _VARINT:
            _, at = _varint(data, at)
        elif wire_type in (_FIXED64, _FIXED32):
            at += 8 if wire_type == _FIXED64 else 4
        else:
            return None  # groups (deprecated) and invalid wire types: protobuf's to judge
    if at != end:
        return None
    if not raw:
        return data, raw
    kept.append(view[kept_from:])
    return b"".join(kept), raw


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it (past the end when it is cut short, which
    the walk then refuses)."""
    value, shift, end = 0, 0, len(data)
    while at < end and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    return 0, end + 1


__all__ = ["ReceivedInfer", "parse_infer_request"]
