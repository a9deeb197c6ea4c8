"""Errors of the notebook facade that read like answers (issue #14).

A failed ``bench.infer`` used to show 25 lines of library frames before the one line that
mattered. ``explained`` keeps the error's type and attributes (so ``except InvalidArgumentError``
and ``.code`` work as before) and adds to its message what the model expects and, where it is
obvious, what to change: a near input or model name, a missing batch dimension, a dtype. In
IPython the error then shows as that short block without the library's frames: IPython calls an
exception's ``_render_traceback_()`` instead of printing its traceback
(``InteractiveShell.showtraceback``). Plain Python still prints the whole traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.errors import NotFoundError, WorkbenchError

E = TypeVar("E", bound=WorkbenchError)
#: list every model name in a hint when there are at most this many
_LIST_ALL = 12


def explained(error: E, details: Sequence[str]) -> E:
    """``error`` with ``details`` added to its message and a short notebook rendering."""
    message = "\n".join([error.message, *details]) if details else error.message
    better = type(error)(message)
    better.status = error.status
    lines = [f"{type(error).__name__}: {message}"]
    better._render_traceback_ = lambda: lines  # type: ignore[attr-defined]
    return better


def infer_details(
    name: str,
    inputs: Mapping[str, Any],
    error: WorkbenchError,
    metadata: Callable[[], Mapping[str, Any]],
    model_names: Callable[[], list[str]],
) -> list[str]:
    """What to add to a failed ``infer``'s error: the expected inputs and a suggestion."""
    if isinstance(error, NotFoundError) or "unknown model" in error.message:
        return _unknown_model(name, model_names())
    try:
        expected = list(metadata().get("inputs", []))
    except WorkbenchError:
        return []
    lines = [f"'{name}' expects:"]
    lines += [f"  {t['name']}  {t['datatype']}  {list(t['shape'])}" for t in expected]
    return lines + _hints(inputs, expected)


def _unknown_model(name: str, names: list[str]) -> list[str]:
    close = difflib.get_close_matches(name, names, n=3)
    lines = [f"did you mean {_quoted(close)}?"] if close else []
    if len(names) <= _LIST_ALL:
        lines.append(f"models in the repository: {', '.join(sorted(names)) or '(none)'}")
    return lines


def _hints(inputs: Mapping[str, Any], expected: list[Mapping[str, Any]]) -> list[str]:
    specs = {t["name"]: t for t in expected}
    hints = []
    for key, value in inputs.items():
        spec = specs.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, list(specs), n=1)
            unsent = [n for n in specs if n not in inputs]
            if close or len(unsent) == 1:
                hints.append(
                    f"hint: '{key}' is not an input; did you mean '{(close or unsent)[0]}'?"
                )
            continue
        hints += _array_hints(key, np.asarray(value), spec)
    return hints


def _array_hints(key: str, array: np.ndarray, spec: Mapping[str, Any]) -> list[str]:
    hints = []
    shape = [int(d) for d in spec["shape"]]
    if shape and shape[0] == -1 and _fits(array.shape, shape[1:]):
        hints.append(
            f"hint: '{key}' has no batch dimension: send {key}[None] "
            f"(shape {(1, *array.shape)}) or np.stack of several"
        )
    dtype = WIRE_TO_NUMPY.get(spec["datatype"])
    if dtype is not None and array.dtype.kind != np.dtype(dtype).kind:
        hints.append(f"hint: '{key}' is {array.dtype}; send {key}.astype(np.{np.dtype(dtype)})")
    return hints


def _fits(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(d in (-1, s) for s, d in zip(shape, dims, strict=True))


def _quoted(names: list[str]) -> str:
    return " or ".join(f"'{n}'" for n in names)


__all__ = ["explained", "infer_details"]
