"""Shared value types and aliases used across every layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from os import PathLike
from typing import Any, Union

import numpy as np

StrPath = Union[str, "PathLike[str]"]
#: Request/response parameters as KServe v2 carries them (bool, int, float or str values).
Parameters = dict[str, Any]


@dataclass(slots=True)
class Tensor:
    """A named tensor with its Triton wire datatype.

    ``array`` holds the values: ``BYTES`` as an object array of ``bytes``, ``BF16`` as a
    ``uint16`` array of raw bfloat16 bits (numpy has no bfloat16), every other type as the
    matching numpy dtype. The shape is ``array.shape``.
    """

    name: str
    datatype: str
    array: np.ndarray
    parameters: Parameters = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.array.shape)


#: Triton serialises each BYTES element as a little-endian uint32 length, then the bytes.
_LENGTH_BYTES = 4


def as_bytes(item: object) -> bytes:
    """One BYTES element as ``bytes`` (``str`` is UTF-8 encoded, other values ``str()``-ed)."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    return str(item).encode("utf-8")


def serialize_bytes(array: np.ndarray) -> bytes:
    """Triton's serialised BYTES: every element, in C order, behind its uint32 length."""
    parts: list[bytes] = []
    for item in array.reshape(-1):
        data = as_bytes(item)
        parts.append(len(data).to_bytes(_LENGTH_BYTES, "little"))
        parts.append(data)
    return b"".join(parts)


def split_bytes(data: bytes | memoryview, count: int | None = None) -> list[bytes]:
    """The elements of serialised BYTES (the first ``count`` of them when given).

    Raises ``ValueError`` saying how many whole elements there were when the data ends inside
    a length or an element, or holds fewer than ``count``.
    """
    elements: list[bytes] = []
    offset, end = 0, len(data)
    while offset < end and (count is None or len(elements) < count):
        size = int.from_bytes(data[offset : offset + _LENGTH_BYTES], "little")
        start = offset + _LENGTH_BYTES
        if start > end or start + size > end:
            raise ValueError(f"the data ends inside element {len(elements)}")
        elements.append(bytes(data[start : start + size]))
        offset = start + size
    if count is not None and len(elements) < count:
        raise ValueError(f"only has {len(elements)}")
    return elements
