"""Checks of ``input`` and ``output`` tensors (Triton's ``ValidateIOShape`` and friends)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from math import prod
from typing import TypeAlias

from tritonclient.grpc.model_config_pb2 import DataType, ModelInput, ModelOutput

from workbench.config._context import Context, Problem
from workbench.config.platforms import backend_name

Tensor: TypeAlias = ModelInput | ModelOutput
WILDCARD_DIM = -1


def tensor_problems(ctx: Context) -> Iterator[Problem]:
    """Problems of every input and output, and of duplicate names."""
    for kind, tensors in (("input", ctx.config.input), ("output", ctx.config.output)):
        yield from _duplicate_problems(ctx, kind, tensors)
        for index, tensor in enumerate(tensors):
            yield from _one_tensor_problems(ctx, kind, index, tensor)


def _duplicate_problems(ctx: Context, kind: str, tensors: Sequence[Tensor]) -> Iterator[Problem]:
    first_index: dict[str, int] = {}
    for index, tensor in enumerate(tensors):
        if tensor.name in first_index:
            yield ctx.problem(
                f"{kind}[{index}].name",
                f"{kind} name '{tensor.name}' is already used by "
                f"{kind}[{first_index[tensor.name]}]; names must be unique",
            )
        elif tensor.name:
            first_index[tensor.name] = index


def _one_tensor_problems(ctx: Context, kind: str, index: int, tensor: Tensor) -> Iterator[Problem]:
    field = f"{kind}[{index}]"
    if not tensor.name:
        yield ctx.problem(f"{field}.name", f"{kind} {index} has no 'name'")
    label = f"{kind} '{tensor.name or index}'"
    if tensor.data_type == DataType.TYPE_INVALID:
        yield ctx.problem(f"{field}.data_type", f"{label} must set 'data_type' (e.g. TYPE_FP32)")
    yield from _dims_problems(ctx, field, label, tensor)
    if tensor.HasField("reshape"):
        yield from _reshape_problems(ctx, field, label, tensor)
    yield from _tensorrt_only_problems(ctx, field, label, tensor)
    if isinstance(tensor, ModelInput):
        yield from _format_problems(ctx, field, label, tensor)


def _dims_problems(ctx: Context, field: str, label: str, tensor: Tensor) -> Iterator[Problem]:
    dims = list(tensor.dims)
    if not dims:
        # Triton has no scalar dims; a scalar is dims [1] with reshape { shape: [] }.
        yield ctx.problem(
            f"{field}.dims",
            f"{label} must set 'dims'; for a scalar use dims: [1] with reshape: {{ shape: [] }}",
        )
    elif not _valid_dims(dims):
        yield ctx.problem(
            f"{field}.dims",
            f"{label} has dims {dims}; each dimension must be >= 1, or -1 for a variable size",
        )


def _valid_dims(dims: Sequence[int]) -> bool:
    return all(dim >= 1 or dim == WILDCARD_DIM for dim in dims)


def _reshape_problems(ctx: Context, field: str, label: str, tensor: Tensor) -> Iterator[Problem]:
    dims, shape = list(tensor.dims), list(tensor.reshape.shape)
    where = f"{field}.reshape.shape"
    if not shape and ctx.config.max_batch_size == 0:
        yield ctx.problem(
            where,
            f"{label} cannot have an empty reshape when max_batch_size is 0 (a "
            "non-batching model cannot have scalar tensors)",
        )
    elif not _valid_dims(shape):
        yield ctx.problem(where, f"{label} has reshape {shape}; each dimension must be >= 1, or -1")
    elif dims and _valid_dims(dims) and not _same_size(dims, shape):
        yield ctx.problem(
            where,
            f"{label}: reshape {shape} does not hold the same number of elements as dims {dims}",
        )


def _same_size(dims: list[int], shape: list[int]) -> bool:
    """Whether ``dims`` and ``shape`` hold as many elements, chunk by chunk between -1s.

    Like Triton: [2, 4, -1, 6] -> [8, -1, 1, 6] is fine (2*4 = 8 and 6 = 1*6); an empty
    shape (a scalar) matches dims holding exactly one element.
    """
    if not shape:
        return WILDCARD_DIM not in dims and prod(dims) == 1
    return _chunks(dims) == _chunks(shape)


def _chunks(dims: list[int]) -> list[int]:
    chunks, current = [], 1
    for dim in dims:
        if dim == WILDCARD_DIM:
            chunks.append(current)
            current = 1
        else:
            current *= dim
    return [*chunks, current]


def _tensorrt_only_problems(
    ctx: Context, field: str, label: str, tensor: Tensor
) -> Iterator[Problem]:
    is_tensorrt = backend_name(ctx.config) == "tensorrt"
    if tensor.is_shape_tensor and not is_tensorrt:
        yield ctx.problem(
            f"{field}.is_shape_tensor", f"{label}: shape tensors are for TensorRT models only"
        )
    if tensor.is_non_linear_format_io and not is_tensorrt:
        yield ctx.problem(
            f"{field}.is_non_linear_format_io",
            f"{label}: non-linear IO formats are for TensorRT models only",
        )
    elif tensor.is_non_linear_format_io and len(tensor.dims) != 3:
        yield ctx.problem(f"{field}.dims", f"{label}: a non-linear IO format needs exactly 3 dims")


def _format_problems(ctx: Context, field: str, label: str, tensor: ModelInput) -> Iterator[Problem]:
    image_formats = (ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW)
    if tensor.format in image_formats and len(tensor.dims) != 3:
        name = ModelInput.Format.Name(tensor.format)
        yield ctx.problem(f"{field}.format", f"{label}: format {name} needs exactly 3 dims")
