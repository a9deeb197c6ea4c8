"""Compare one model's outputs from two servers: exact for integers, booleans and strings,
within a tolerance for floating point."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    """``numpy.allclose`` bounds for floating-point outputs."""

    rtol: float = 1e-5
    atol: float = 1e-6


def output_mismatch(name: str, expected: np.ndarray, actual: np.ndarray, tol: Tolerance) -> str:
    """Why ``actual`` differs from ``expected`` ("" when they match)."""
    if expected.shape != actual.shape:
        return f"output '{name}': shape {list(actual.shape)}, expected {list(expected.shape)}"
    if expected.dtype.kind in "OSU" or actual.dtype.kind in "OSU":
        same = [a == b for a, b in zip(_as_bytes(expected), _as_bytes(actual), strict=True)]
        if all(same):
            return ""
        first = same.index(False)
        return (
            f"output '{name}': element {first} is {_as_bytes(actual)[first]!r}, "
            f"expected {_as_bytes(expected)[first]!r}"
        )
    if expected.dtype != actual.dtype:
        return f"output '{name}': dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.kind == "f":
        if np.allclose(actual, expected, rtol=tol.rtol, atol=tol.atol, equal_nan=True):
            return ""
        worst = float(np.nanmax(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
        return f"output '{name}': max abs difference {worst:.3g} > tolerance {tol}"
    if np.array_equal(actual, expected):
        return ""
    count = int(np.count_nonzero(actual != expected))
    return f"output '{name}': {count} of {expected.size} elements differ"


def outputs_mismatch(
    expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray], tol: Tolerance
) -> str:
    """The first difference between two responses' outputs ("" when all match)."""
    missing = sorted(set(expected) ^ set(actual))
    if missing:
        return f"outputs {', '.join(missing)} are only in one response"
    for name in sorted(expected):
        why = output_mismatch(name, expected[name], actual[name], tol)
        if why:
            return why
    return ""


def _as_bytes(array: np.ndarray) -> list[bytes]:
    return [item if isinstance(item, bytes) else str(item).encode() for item in array.reshape(-1)]


#: the default bounds
DEFAULT_TOLERANCE = Tolerance()

__all__ = ["DEFAULT_TOLERANCE", "Tolerance", "output_mismatch", "outputs_mismatch"]
