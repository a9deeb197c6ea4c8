"""Tensor plumbing shared by the framework backends: batching, dtypes and bytes.

A batching backend (``max_batch_size > 0``) stacks the requests of one ``execute`` call along
dimension 0, runs the model once and hands each request back its own slice of every output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.backends.base import ExecRequest, ExecResult, fail_all
from workbench.config.dtypes import config_to_wire, numpy_dtype, wire_from_numpy
from workbench.errors import InvalidArgumentError, WorkbenchError


def batch_sizes(requests: Sequence[ExecRequest]) -> list[int]:
    """The batch size of each request: the first dimension of its first input."""
    sizes = []
    for request in requests:
        first = next(iter(request.inputs.values()), None)
        if first is None or first.array.ndim == 0:
            raise InvalidArgumentError(f"request '{request.id}' has no batch dimension")
        sizes.append(int(first.array.shape[0]))
    return sizes


def concat_inputs(requests: Sequence[ExecRequest]) -> dict[str, np.ndarray]:
    """Stack every input of ``requests`` along dimension 0 (one array per input name)."""
    names = list(requests[0].inputs)
    batched: dict[str, np.ndarray] = {}
    for name in names:
        parts = []
        for request in requests:
            if name not in request.inputs:
                raise InvalidArgumentError(f"request '{request.id}' lacks input '{name}'")
            parts.append(request.inputs[name].array)
        batched[name] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    return batched


def split_rows(array: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Cut ``array`` along dimension 0 into consecutive pieces of ``sizes`` rows."""
    if array.ndim == 0 or array.shape[0] != sum(sizes):
        raise WorkbenchError(
            f"model returned {array.shape[0] if array.ndim else 0} rows for a batch of {sum(sizes)}"
        )
    bounds = np.cumsum(sizes)[:-1]
    return np.split(array, bounds, axis=0)


def to_bytes_array(array: np.ndarray) -> np.ndarray:
    """An object array of ``bytes`` (str elements UTF-8 encoded, others ``str()``-ed first)."""
    flat = [_as_bytes(item) for item in array.reshape(-1)]
    out = np.empty(len(flat), dtype=np.object_)
    out[:] = flat
    return out.reshape(array.shape)


def to_str_array(array: np.ndarray) -> np.ndarray:
    """An object array of ``str`` (what onnxruntime expects for string tensors)."""
    flat = [item.decode("utf-8") if isinstance(item, bytes) else str(item) for item in array.flat]
    out = np.empty(len(flat), dtype=np.object_)
    out[:] = flat
    return out.reshape(array.shape)


def _as_bytes(item: object) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, (bytearray, memoryview, np.bytes_)):
        return bytes(item)
    return str(item).encode("utf-8")


def declared_output_types(config: ModelConfig) -> dict[str, str]:
    """Output name -> wire datatype, as declared in the model configuration."""
    return {out.name: config_to_wire(out.data_type) for out in config.output if out.data_type}


def make_tensor(name: str, array: np.ndarray, declared: str | None = None) -> Tensor:
    """A wire ``Tensor`` for a model output, converted to the declared type when one is given."""
    if declared is None:
        declared = wire_from_numpy(array.dtype)
    if declared == "BYTES":
        array = to_bytes_array(np.asarray(array))
    elif array.dtype != numpy_dtype(declared):
        array = array.astype(numpy_dtype(declared))
    return Tensor(name, declared, array)


def wanted(name: str, requested: Sequence[str] | None) -> bool:
    """Whether output ``name`` goes back to a request that asked for ``requested``."""
    return requested is None or name in requested


def results_from_batch(
    requests: Sequence[ExecRequest],
    outputs: dict[str, np.ndarray],
    declared: dict[str, str],
    sizes: Sequence[int] | None,
) -> list[ExecResult]:
    """Per-request results from batch outputs (``sizes`` None: a single unbatched request)."""
    pieces = {
        name: (split_rows(array, sizes) if sizes is not None else [array])
        for name, array in outputs.items()
    }
    results = []
    for index, request in enumerate(requests):
        tensors = [
            make_tensor(name, parts[index], declared.get(name))
            for name, parts in pieces.items()
            if wanted(name, request.requested_outputs)
        ]
        results.append(ExecResult(outputs=tensors))
    return results


#: runs the model on ``arrays`` for ``requests`` (``sizes``: rows per request, None unbatched)
BatchRunner = Callable[
    [Sequence[ExecRequest], dict[str, np.ndarray], "list[int] | None"], list[ExecResult]
]


def execute_batched(
    requests: Sequence[ExecRequest], max_batch_size: int, run: BatchRunner
) -> list[ExecResult]:
    """Run a batching model once for all ``requests``, else once per request.

    Requests whose shapes differ beyond dimension 0 cannot be stacked; they run one by one.
    """
    try:
        if max_batch_size > 0 and len(requests) > 1:
            try:
                return run(requests, concat_inputs(requests), batch_sizes(requests))
            except ValueError:
                pass  # np.concatenate: shapes differ beyond the batch dimension
        results: list[ExecResult] = []
        for request in requests:
            arrays = {name: tensor.array for name, tensor in request.inputs.items()}
            sizes = batch_sizes([request]) if max_batch_size > 0 else None
            results.extend(run([request], arrays, sizes))
        return results
    except WorkbenchError as exc:
        return fail_all(len(requests), exc)
