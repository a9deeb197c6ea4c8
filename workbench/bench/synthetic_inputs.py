"""Request tensors for a load test, made up from a model's metadata (as perf_analyzer does).

Fixed dims are filled with seeded random data of the declared type; the batch dimension of a
batching model becomes 1. A dimension of ``-1`` anywhere else has no size to guess: the caller
gives ``inputs=`` (the arrays themselves) or ``shapes=`` (the dims without the batch one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from workbench.config.dtypes import numpy_dtype
from workbench.errors import InvalidArgumentError

#: the bytes sent for every element of a BYTES/STRING input
BYTES_SAMPLE = b"a rather good day"


def _request_dims(spec: Mapping[str, Any], batching: bool, hint: Sequence[int] | None) -> list[int]:
    name, dims = spec["name"], [int(d) for d in spec["shape"]]
    inner = dims[1:] if batching else dims
    if hint is not None:
        hint = [int(d) for d in hint]
        if len(hint) != len(inner) or any(d < 0 for d in hint):
            raise InvalidArgumentError(
                f"shape hint {hint} for input '{name}' does not fit its dims {inner} "
                "(give every dim without the batch dimension, no -1)"
            )
        inner = [h if d == -1 else d for d, h in zip(inner, hint, strict=True)]
    if any(d < 0 for d in inner):
        raise InvalidArgumentError(
            f"input '{name}' has dynamic dims {inner}: pass inputs={{'{name}': array}} or "
            f"shapes={{'{name}': [...]}} (the dims without the batch dimension) to size it"
        )
    return [1, *inner] if batching else inner


def _random_array(datatype: str, dims: list[int], rng: np.random.Generator) -> np.ndarray:
    if datatype == "BYTES":
        return np.full(dims, BYTES_SAMPLE, dtype=np.object_)
    dtype = numpy_dtype(datatype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=dims).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 10, size=dims).astype(dtype)
    return rng.random(size=dims).astype(dtype)


def synthesize_inputs(
    metadata: Mapping[str, Any],
    *,
    max_batch_size: int,
    inputs: Mapping[str, Any] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """One request's inputs by name: the given ``inputs`` first, the rest synthesised.

    ``metadata`` is the model's KServe v2 metadata (``inputs`` with name, datatype, shape).
    """
    given = dict(inputs or {})
    hints = dict(shapes or {})
    declared = {spec["name"]: spec for spec in metadata.get("inputs", [])}
    unknown = sorted((set(given) | set(hints)) - set(declared))
    if unknown:
        raise InvalidArgumentError(
            f"model '{metadata.get('name', '')}' has no input(s) {', '.join(unknown)}; "
            f"its inputs are {', '.join(declared) or 'none'}"
        )
    rng = np.random.default_rng(seed)
    batching = max_batch_size > 0
    arrays: dict[str, np.ndarray] = {}
    for name, spec in declared.items():
        if name in given:
            arrays[name] = np.asarray(given[name])
        else:
            dims = _request_dims(spec, batching, hints.get(name))
            arrays[name] = _random_array(spec["datatype"], dims, rng)
    return arrays


__all__ = ["BYTES_SAMPLE", "synthesize_inputs"]
