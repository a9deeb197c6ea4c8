"""Tensor <-> bytes in Triton's binary tensor layout.

Fixed-size types are their little-endian element bytes; ``BYTES`` elements are each prefixed
with a 4-byte little-endian length; ``BF16`` travels as its raw 16 bits (``uint16`` here).
"""

from __future__ import annotations

import math

import numpy as np

from workbench._types import as_bytes, serialize_bytes
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.errors import InvalidArgumentError

_LENGTH = 4
#: numpy kinds whose buffer is their little-endian element bytes (bool, ints, floats)
_BUFFER_KINDS = frozenset("biuf")


def request_prefix(request_id: str) -> str:
    """What Triton's core puts before its request errors (``InferenceRequest::LogRequest``)."""
    return f"[request id: {request_id or '<id_unknown>'}] "


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
    """Length-prefixed elements -> object array of ``bytes`` with ``shape``."""
    count = math.prod(shape)
    where = f"inference input '{name}' for model '{model}'"
    items: list[bytes] = []
    offset, end = 0, len(chunk)
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
            raise InvalidArgumentError(
                f"{prefix}string element {len(items)} of {where} needs {length} bytes but only "
                f"{end - offset} remain in its binary data"
            )
        items.append(bytes(chunk[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise InvalidArgumentError(
            f"{prefix}expected {count} string elements for {where}, got {len(items)}"
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
    "as_bytes",
    "request_prefix",
    "deserialize_bytes",
    "serialize_bytes",
    "tensor_buffer",
    "tensor_from_buffer",
]
