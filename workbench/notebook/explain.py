"""Errors of the notebook facade that read like answers (issue #14).

A failed ``bench.infer`` used to show 25 lines of library frames before the one line that
mattered. ``explained`` keeps the error's type and attributes (so ``except InvalidArgumentError``
and ``.code`` work as before) and adds to its message what the model expects and, where it is
obvious, what to change: a near input or model name, a missing batch dimension, a dtype. In
IPython the error then shows as that short block without the library's frames: IPython calls an
exception's ``_render_traceback_()`` instead of printing its traceback
(``InteractiveShell.showtraceback``). Plain Python still prints the whole traceback, with the
same message. A model name that is right but not serving (unloaded, failed, no such version) is
told apart from an unknown one, so the hint never suggests the name the user already typed.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.errors import InvalidArgumentError, WorkbenchError
from workbench.notebook.triton_http import TritonHttp

E = TypeVar("E", bound=WorkbenchError)
#: list every model name in a hint when there are at most this many
_LIST_ALL = 12


class ShortTraceback:
    """An explained error's ``_render_traceback_``: the type and message, no frames.

    A class rather than a closure so that the error still pickles (multiprocessing, joblib)."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = list(lines)

    def __call__(self) -> list[str]:
        return list(self.lines)


def explained(error: E, details: Sequence[str]) -> E:
    """``error`` with ``details`` added to its message and a short notebook rendering; its
    type and attributes (``.status``, ``.code``, ...) stay as they were."""
    message = "\n".join([error.message, *details])
    better = type(error)(message)
    better.__dict__.update(error.__dict__)
    better.message = message
    rendering = ShortTraceback(f"{type(error).__name__}: {message}".splitlines())
    better._render_traceback_ = rendering  # type: ignore[attr-defined]
    return better


def infer_details(
    error: WorkbenchError,
    server: TritonHttp,
    name: str,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None = None,
    version: str = "",
) -> list[str]:
    """What to add to a failed ``infer``'s error: why the model cannot answer, or, for a
    refused request, what the model expects and a suggestion where one is obvious."""
    try:
        metadata = server.metadata(name, version)
    except WorkbenchError:
        return model_details(server, name, version)
    if not isinstance(error, InvalidArgumentError):
        return []  # the request was fine; the model or the server failed
    expected = list(metadata.get("inputs", []))
    lines = [f"'{name}' expects:", *_tensor_lines(expected)]
    lines += _input_hints(inputs, expected, _batching(server, name, version))
    return lines + _output_details(name, outputs or (), list(metadata.get("outputs", [])))


def model_details(server: TritonHttp, name: str, version: str = "") -> list[str]:
    """Why ``name`` (at ``version``) cannot answer: near names for an unknown model, the state
    and reason of one that is not serving, the versions that serve."""
    try:
        index = server.index()
    except WorkbenchError:
        return []
    entries = [entry for entry in index if entry.get("name") == name]
    if not entries:
        return _unknown_model(name, sorted({str(entry.get("name")) for entry in index}))
    ready = [str(entry.get("version", "")) for entry in entries if entry.get("state") == "READY"]
    if not ready:
        state = entries[0].get("state") or "not loaded"
        reason = str(entries[0].get("reason") or "").strip().splitlines()
        because = f" ({reason[0]})" if reason else ""
        return [f"hint: '{name}' is {state}{because}; load it with bench.load('{name}')"]
    if version and version not in ready:
        return [f"hint: '{name}' serves version {', '.join(ready)}; omit version= for the newest"]
    return []


def _unknown_model(name: str, names: list[str]) -> list[str]:
    close = difflib.get_close_matches(name, names, n=3)
    lines = [f"did you mean {_quoted(close)}?"] if close else []
    if len(names) <= _LIST_ALL:
        lines.append(f"models in the repository: {', '.join(names) or '(none)'}")
    return lines


def _tensor_lines(tensors: list[Mapping[str, Any]]) -> list[str]:
    return [f"  {t['name']}  {t['datatype']}  {list(t['shape'])}" for t in tensors]


def _batching(server: TritonHttp, name: str, version: str) -> bool:
    """Whether the model batches: then its first metadata dim is the batch, not a config dim."""
    try:
        return server.config(name, version).max_batch_size > 0
    except WorkbenchError:
        return False


def _input_hints(
    inputs: Mapping[str, Any], expected: list[Mapping[str, Any]], batching: bool
) -> list[str]:
    specs = {t["name"]: t for t in expected}
    unsent = [n for n in specs if n not in inputs]
    hints = []
    for key, value in inputs.items():
        spec = specs.get(key)
        if spec is None:
            hints.append(_not_one("input", key, list(specs), unsent))
        else:
            hints += _array_hints(key, np.asarray(value), spec, batching)
    return hints


def _output_details(
    name: str, requested: Sequence[str], returned: list[Mapping[str, Any]]
) -> list[str]:
    names = [t["name"] for t in returned]
    unknown = [key for key in requested if key not in names]
    if not unknown:
        return []
    hints = [_not_one("output", key, names, []) for key in unknown]
    return [f"'{name}' returns:", *_tensor_lines(returned), *hints]


def _not_one(kind: str, key: str, names: list[str], unsent: list[str]) -> str:
    """A hint for a tensor name the model does not have: the near name, else the one input
    still missing, else leave it out."""
    near = difflib.get_close_matches(key, names, n=1) or (unsent if len(unsent) == 1 else [])
    if near:
        return f"hint: '{key}' is not an {kind}; did you mean '{near[0]}'?"
    return f"hint: '{key}' is not an {kind} of the model; leave it out"


def _array_hints(key: str, array: np.ndarray, spec: Mapping[str, Any], batching: bool) -> list[str]:
    hints = []
    dims = [int(d) for d in spec["shape"]]
    if batching and _fits(array.shape, dims[1:]):
        hints.append(
            f"hint: '{key}' has shape {array.shape}, without the batch dimension: send "
            f"x[None] or np.expand_dims(x, 0) (shape {(1, *array.shape)}), or np.stack of several"
        )
    return hints + _dtype_hints(key, array, spec["datatype"])


def _dtype_hints(key: str, array: np.ndarray, datatype: str) -> list[str]:
    """A cast to suggest when the array's dtype is one the facade does not cast by itself
    (it casts within a kind, e.g. float64 to FP32: ``triton_http._as_array``)."""
    if datatype == "BYTES":
        if array.dtype.kind in "OSU":
            return []
        return [f"hint: '{key}' is {array.dtype} but the model takes BYTES: send str or bytes"]
    target = WIRE_TO_NUMPY.get(datatype)
    if target is None or datatype == "BF16" or np.can_cast(array.dtype, target, "same_kind"):
        return []
    return [
        f"hint: '{key}' is {array.dtype} but the model takes {datatype}: "
        f"send x.astype(np.{target.type.__name__})"
    ]


def _fits(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(d in (-1, s) for s, d in zip(shape, dims, strict=True))


def _quoted(names: list[str]) -> str:
    return " or ".join(f"'{n}'" for n in names)


__all__ = ["ShortTraceback", "explained", "infer_details", "model_details"]
