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
