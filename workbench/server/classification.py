"""Triton's classification extension: an output's top-k classes instead of its scores.

Mirrors ``TopkClassifications`` (``src/classification.cc``, Triton 2.51): each class is the
string ``"<score>:<index>"`` (``"<score>:<index>:<label>"`` when the output has a
``label_filename``), scores printed as C's ``%f`` for floating point and ``%d`` for integers;
batching models get one row of ``k`` classes per batch entry.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench._types import Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError, WorkbenchError

_FLOAT_TYPES = frozenset({"FP32", "FP64"})
_INT_TYPES = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"})


def classify(
    tensor: Tensor, count: int, labels: list[str] | None = None, batched: bool = False
) -> Tensor:
    """The top-``count`` classes of ``tensor`` as a BYTES tensor of the same name.

    ``batched``: the model has ``max_batch_size > 0``, so the first dimension is the batch.
    """
    if tensor.datatype in _FLOAT_TYPES:
        template = "%f:%d"
    elif tensor.datatype in _INT_TYPES:
        template = "%d:%d"
    else:
        raise InvalidArgumentError(
            f"class result not available for output due to unsupported type '{tensor.datatype}'"
        )
    array = tensor.array
    batch = array.shape[0] if batched and array.ndim > 0 else 0
    rows = array.reshape(max(batch, 1), -1)
    k = min(count, rows.shape[1])
    classes = [_top_k(row, k, labels, template) for row in rows]
    result = np.empty(len(classes) * k, dtype=np.object_)
    result[:] = [item for row in classes for item in row]
    shape = (batch, k) if batch else (k,)
    return Tensor(tensor.name, "BYTES", result.reshape(shape))


def _top_k(row: np.ndarray, k: int, labels: list[str] | None, template: str) -> list[bytes]:
    # Descending by score, ties by ascending index: a stable ascending sort of the reversed
    # row, read backwards, without negating (unsigned types cannot be negated).
    last = len(row) - 1
    order = last - np.argsort(row[::-1], kind="stable")[::-1][:k]
    out = []
    for index in order.tolist():
        text = template % (row[index], index)
        if labels is not None and index < len(labels):
            text += ":" + labels[index]
        out.append(text.encode("utf-8"))
    return out


def classify_outputs(
    core: Any, request: InferRequest, response: InferResponse, batched: bool
) -> None:
    """Replace each output the request asked classes of (``classification`` output parameter)
    by its top-k classes, with labels from ``core.output_labels`` when the output has them.

    Shared by the HTTP and gRPC front ends; ``batched``: the model has ``max_batch_size > 0``.
    """
    if not request.output_parameters:
        return
    for index, tensor in enumerate(response.outputs):
        params = request.output_parameters.get(tensor.name)
        count = params.get("classification") if params else None
        if count:
            labels = _labels(core, response, tensor.name)
            response.outputs[index] = classify(tensor, count, labels, batched)


def _labels(core: Any, response: InferResponse, output: str) -> list[str] | None:
    labels_of = getattr(core, "output_labels", None)
    if labels_of is None:
        return None
    try:
        labels: list[str] | None = labels_of(response.model_name, response.model_version, output)
    except WorkbenchError:
        return None
    return labels


__all__ = ["classify", "classify_outputs"]
