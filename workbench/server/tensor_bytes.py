"""Tensor <-> bytes in Triton's binary tensor layout.

Fixed-size types are their little-endian element bytes; ``BYTES`` elements are each prefixed
with a 4-byte little-endian length; ``BF16`` travels as its raw 16 bits (``uint16`` here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from workbench._types import as_bytes, serialize_bytes
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.errors import InvalidArgumentError

_LENGTH = 4
#: numpy's most dimensions (``NPY_MAXDIMS``: 32 before numpy 2); Triton itself has no limit
MAX_DIMS = 32
#: the most elements a shape may describe (its non-zero dims): with 8-byte items, numpy's
#: byte count (an ``intp``) must not overflow, even for an array whose other dim is 0
MAX_ELEMENTS = 2**60 - 1
#: numpy kinds whose buffer is their little-endian element bytes (bool, ints, floats)
_BUFFER_KINDS = frozenset("biuf")


def request_prefix(request_id: str) -> str:
    """What Triton's core puts before its request errors (``InferenceRequest::LogRequest``)."""
    return f"[request id: {request_id or '<id_unknown>'}] "


def shape_fits(shape: Sequence[int]) -> bool:
    """Whether numpy can make an array of ``shape`` of any item size: no negative dims, at
    most ``MAX_DIMS`` of them, at most ``MAX_ELEMENTS`` elements."""
    if len(shape) > MAX_DIMS or (shape and min(shape) < 0):
        return False
    return math.prod(dim for dim in shape if dim) <= MAX_ELEMENTS


def tensor_from_buffer(
    chunk: memoryview, datatype: str, shape: tuple[int, ...], prefix: str, name: str, model: str
) -> np.ndarray:
    """A fixed-size-type array viewing ``chunk`` (no copy); Triton's text on a size mismatch."""
    dtype = WIRE_TO_NUMPY[datatype]
    expected = math.prod(shape) * dtype.itemsize
    if len(chunk) != expected:
        raise InvalidArgumentError(
            f"{prefix}input byte size mismatch for input '{name}' for model '{model}'. "
            f"Expected {expected}, got {len(chunk)}"
        )
    return np.frombuffer(chunk, dtype=dtype).reshape(shape)


def deserialize_bytes(
    chunk: memoryview, shape: tuple[int, ...], prefix: str, name: str, model: str
) -> np.ndarray:
    """Length-prefixed elements -> object array of ``bytes`` with ``shape``.

    Refused as Triton refuses them: its core counts the elements (``ValidateBytesInputs`` in
    ``core/src/infer_request.cc``), taking a last element longer than what is left as the rest
    of the data; the backend then refuses that one (``ValidateStringBuffer`` in
    ``backend/src/backend_common.cc``, without the request id).
    """
    count = math.prod(shape)
    where = f"inference input '{name}' for model '{model}'"
    items: list[bytes] = []
    offset, end = 0, len(chunk)
    cut: tuple[int, int] | None = None  # (length, bytes left) of an element cut short
    while offset < end:
        if end - offset < _LENGTH:
            raise InvalidArgumentError(
                f"{prefix}incomplete string length indicator for {where}, expecting {_LENGTH} "
                f"bytes but only {end - offset} bytes available. Please make sure the string "
                "length indicator is in one buffer."
            )
        if len(items) == count:
            raise InvalidArgumentError(
                f"{prefix}unexpected number of string elements {count + 1} for {where}, "
                f"expecting {count}"
            )
        length = int.from_bytes(chunk[offset : offset + _LENGTH], "little")
        offset += _LENGTH
        if offset + length > end:
            cut = (length, end - offset)
            items.append(b"")
            break
        items.append(bytes(chunk[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise InvalidArgumentError(
            f"{prefix}expected {count} string elements for {where}, got {len(items)}"
        )
    if cut is not None:
        raise InvalidArgumentError(
            f"incomplete string data for inference input '{name}', expecting string of length "
            f"{cut[0]} but only {cut[1]} bytes available"
        )
    array = np.empty(count, dtype=np.object_)
    array[:] = items
    return array.reshape(shape)


def tensor_buffer(array: np.ndarray, datatype: str) -> bytes | memoryview:
    """The binary tensor data of an output; fixed-size types without a copy when contiguous."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    dtype = array.dtype
    if dtype.kind in _BUFFER_KINDS and dtype.byteorder != ">":
        try:
            return array.data.cast("B")  # the usual case: one call, no numpy view
        except TypeError:
            pass  # not C-contiguous, or empty (memoryview cannot cast those)
    contiguous = np.ascontiguousarray(array)
    if contiguous.dtype.byteorder == ">":
        contiguous = contiguous.astype(contiguous.dtype.newbyteorder("<"))
    return contiguous.reshape(-1).view(np.uint8).data


__all__ = [
    "MAX_DIMS",
    "MAX_ELEMENTS",
    "as_bytes",
    "request_prefix",
    "deserialize_bytes",
    "serialize_bytes",
    "shape_fits",
    "tensor_buffer",
    "tensor_from_buffer",
]
