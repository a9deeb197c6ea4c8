"""A configuration against the model file it serves, as Triton's backends check it at load.

A config can be valid on its own and still not fit its model: ``dims: [5]`` for an ONNX input
that takes 4 values loads nowhere. Triton's backends refuse such a model when they create its
instances; these checks say the same before anything is written. Each message starts with the
backend's own text, then says what to change. The sources (Triton 2.51, branch ``r24.10``):

- ``triton-inference-server/onnxruntime_backend``, ``src/onnxruntime.cc``: the expected input
  count in the ``ModelInstanceState`` constructor (configured inputs less the optional ones,
  plus ``batch_input``, sequence controls and states), ``ValidateInputs`` and
  ``ValidateOutputs``; ``src/onnxruntime_utils.cc``: ``CompareDimsSupported`` (a variable
  graph dimension accepts any configured size for an input; outputs compare exactly).
- ``triton-inference-server/backend``, ``src/backend_common.cc``: ``CheckAllowedModelInput``
  and ``CheckAllowedModelOutput`` (the "unexpected inference input" messages).
- ``triton-inference-server/pytorch_backend``, ``src/libtorch.cc``: ``ValidateInputs``, whose
  input count is all that a TorchScript file tells before it runs.

Triton stops at the first problem; these report every one.

The messages are matched against the text in those sources, not against a running
tritonserver: the one the conformance tests run (the ``nvidia-pytriton`` build) has the python
backend only, no onnxruntime or pytorch backend to load such a model and answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelSequenceBatching

from workbench.config._context import Problem
from workbench.config.dtypes import config_to_wire
from workbench.config.model_files import (
    GraphSignature,
    GraphTensor,
    model_file,
    onnx_signature,
    torchscript_arguments,
)
from workbench.config.platforms import backend_name

__all__ = ["model_file_problems", "onnx_problems", "torchscript_problems"]

_Control = ModelSequenceBatching.Control
_COUNTED_CONTROLS = frozenset(
    {
        _Control.CONTROL_SEQUENCE_START,
        _Control.CONTROL_SEQUENCE_END,
        _Control.CONTROL_SEQUENCE_READY,
        _Control.CONTROL_SEQUENCE_CORRID,
    }
)
_TENSOR_KINDS = frozenset({"TensorType", "ListType"})


def model_file_problems(
    config: ModelConfig, version_paths: Sequence[Path], *, model_name: str
) -> list[Problem]:
    """Problems of ``config`` against the model file in each of ``version_paths`` that can be
    read here (ONNX graphs; the input count of TorchScript files); [] when none can."""
    backend = backend_name(config)
    found: list[Problem] = []
    for version_path in version_paths:
        path = model_file(config, version_path)
        if path is None:
            continue
        if backend == "onnxruntime" and (signature := onnx_signature(path)) is not None:
            found += onnx_problems(config, signature, model_name=model_name)
        elif backend == "pytorch" and (kinds := torchscript_arguments(path)) is not None:
            found += torchscript_problems(config, kinds, model_name=model_name, path=path)
    return list(dict.fromkeys(found))  # versions with the same graph say the same once


# -- onnxruntime -------------------------------------------------------------------------------
def onnx_problems(
    config: ModelConfig, signature: GraphSignature, *, model_name: str
) -> list[Problem]:
    """What Triton's onnxruntime backend would refuse in ``config`` for this graph."""
    found = list(_onnx_count_problems(config, signature, model_name))
    found += _onnx_input_problems(config, signature, model_name)
    found += _onnx_output_problems(config, signature, model_name)
    return found


def _onnx_count_problems(
    config: ModelConfig, signature: GraphSignature, model: str
) -> Iterator[Problem]:
    optional = sum(1 for spec in config.input if spec.optional)
    expected = _expected_input_count(config) - optional
    provided = len(signature.inputs)
    if expected != provided:
        yield Problem(
            "input",
            f"unable to load model '{model}', configuration expects {expected} inputs, model "
            f"provides {provided}; the graph's inputs are {_listing(signature.inputs)}: "
            "configure exactly these",
        )


def _onnx_input_problems(
    config: ModelConfig, signature: GraphSignature, model: str
) -> Iterator[Problem]:
    graph = {t.name: t for t in (*signature.inputs, *signature.overridable)}
    batching = config.max_batch_size > 0
    for index, spec in enumerate(config.input):
        field = f"input[{index}]"
        if spec.optional and batching:
            yield Problem(
                f"{field}.optional",
                f"unable to load model '{model}', optional input '{spec.name}' is not "
                "supported for models that support batching; remove 'optional' or set "
                "max_batch_size: 0",
            )
        tensor = graph.get(spec.name)
        if tensor is None:
            yield Problem(
                f"{field}.name",
                f"unexpected inference input '{spec.name}', allowed inputs are: "
                f"{', '.join(sorted(graph))}; model '{model}': rename it to one of the graph's "
                "inputs",
            )
            continue
        yield from _datatype_problems(model, field, "input", spec.name, spec.data_type, tensor)
        dims = list(spec.reshape.shape) if spec.HasField("reshape") else list(spec.dims)
        where = f"{field}.reshape.shape" if spec.HasField("reshape") else f"{field}.dims"
        if spec.allow_ragged_batch:
            yield from _ragged_problems(model, field, spec.name, tensor)
        else:
            yield from _shape_problems(model, where, tensor, dims, config.max_batch_size, False)


def _onnx_output_problems(
    config: ModelConfig, signature: GraphSignature, model: str
) -> Iterator[Problem]:
    graph = {t.name: t for t in signature.outputs}
    batch_outputs = {name for spec in config.batch_output for name in spec.target_name}
    for index, spec in enumerate(config.output):
        field = f"output[{index}]"
        tensor = graph.get(spec.name)
        if tensor is None:
            yield Problem(
                f"{field}.name",
                f"unexpected inference output '{spec.name}', allowed outputs are: "
                f"{', '.join(sorted(graph))}; model '{model}': rename it to one of the graph's "
                "outputs",
            )
            continue
        yield from _datatype_problems(model, field, "output", spec.name, spec.data_type, tensor)
        if spec.name in batch_outputs:
            continue  # a batch output's shape need not match the graph (as in Triton)
        dims = list(spec.reshape.shape) if spec.HasField("reshape") else list(spec.dims)
        where = f"{field}.reshape.shape" if spec.HasField("reshape") else f"{field}.dims"
        yield from _shape_problems(model, where, tensor, dims, config.max_batch_size, True)


def _datatype_problems(
    model: str, field: str, kind: str, name: str, data_type: int, tensor: GraphTensor
) -> Iterator[Problem]:
    if data_type == DataType.TYPE_INVALID:
        return  # reported by the config's own tensor checks
    if config_to_wire(data_type) != tensor.datatype:
        configured = DataType.Name(data_type)
        yield Problem(
            f"{field}.data_type",
            f"unable to load model '{model}', configuration expects datatype {configured} for "
            f"{kind} '{name}', model provides TYPE_{tensor.datatype}; set data_type: "
            f"{_config_type(tensor.datatype)}",
        )


def _config_type(wire: str) -> str:
    return "TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}"


def _ragged_problems(model: str, field: str, name: str, tensor: GraphTensor) -> Iterator[Problem]:
    if tensor.dims != (-1,):
        # Triton's text has the two spaces before "for".
        yield Problem(
            f"{field}.allow_ragged_batch",
            f"unable to load model '{model}', configuration expects model provides input with "
            f"shape [-1]  for ragged input '{name}', model provides {_shape(tensor.dims)}",
        )


def _shape_problems(
    model: str,
    field: str,
    tensor: GraphTensor,
    dims: list[int],
    max_batch_size: int,
    exact: bool,
) -> Iterator[Problem]:
    if not tensor.dims:  # a scalar in the graph
        if any(dim != 1 for dim in dims):
            yield Problem(
                field,
                f"unable to load model '{model}', scalar tensor '{tensor.name}', should only "
                "provide 1 in the model configuration when the model doesn't support "
                f"batching. Model configuration provided: {_shape(dims)}. Set dims: [1]",
            )
        return
    message = _compare_dims(model, tensor, dims, max_batch_size, exact)
    if message:
        yield Problem(field, f"{message}; {_dims_hint(tensor, max_batch_size)}")


def _compare_dims(
    model: str, tensor: GraphTensor, dims: list[int], max_batch_size: int, exact: bool
) -> str:
    """Triton's ``CompareDimsSupported``: "" when the configured dims fit the graph's."""
    shape, prefix = list(tensor.dims), f"model '{model}', tensor '{tensor.name}': "
    if max_batch_size > 0:
        if shape[0] != -1:
            return (
                f"{prefix}for the model to support batching the shape should have at least 1 "
                "dimension and the first dimension must be -1; but shape expected by the model "
                f"is {_shape(shape)}"
            )
        full = [-1, *dims]
        if _dims_fit(shape, full, exact):
            return ""
        return (
            f"{prefix}the model expects {len(shape)} dimensions (shape {_shape(shape)}) but the "
            f"model configuration specifies {len(full)} dimensions (an initial batch dimension "
            "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
            f"shape {_shape(full)})"
        )
    if _dims_fit(shape, dims, exact):
        return ""
    return (
        f"{prefix}the model expects {len(shape)} dimensions (shape {_shape(shape)}) but the "
        f"model configuration specifies {len(dims)} dimensions (shape {_shape(dims)})"
    )


def _dims_fit(shape: list[int], dims: list[int], exact: bool) -> bool:
    """Same rank, and each graph dimension equal to the configured one; unless ``exact``, a
    variable graph dimension (-1) takes any configured size."""
    return len(shape) == len(dims) and all(
        g == d or (g == -1 and not exact) for g, d in zip(shape, dims, strict=True)
    )


def _dims_hint(tensor: GraphTensor, max_batch_size: int) -> str:
    if max_batch_size > 0 and tensor.dims[0] != -1:
        dims = _shape(tensor.dims)
        return f"the graph has no batch dimension: set max_batch_size: 0 and dims: {dims}"
    wanted = tensor.dims[1:] if max_batch_size > 0 else tensor.dims
    without = " (the graph's shape without its batch dimension)" if max_batch_size > 0 else ""
    return f"set dims: {_shape(wanted)}{without}"


def _shape(dims: Sequence[int]) -> str:
    """Triton's ``ShapeToString``: ``[-1,4]``."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def _listing(tensors: Sequence[GraphTensor]) -> str:
    return ", ".join(f"'{t.name}' {t.datatype} {_shape(t.dims)}" for t in tensors) or "none"


# -- pytorch (TorchScript) ---------------------------------------------------------------------
def torchscript_problems(
    config: ModelConfig, argument_kinds: Sequence[str], *, model_name: str, path: Path
) -> list[Problem]:
    """Triton's libtorch input count check; nothing when ``forward`` takes one dict or an
    argument that is not a tensor (Triton refuses those differently, or maps by name)."""
    kinds = list(argument_kinds)
    if kinds == ["DictType"] or any(kind not in _TENSOR_KINDS for kind in kinds):
        return []
    expected = _expected_input_count(config)
    if expected == len(kinds):
        return []
    return [
        Problem(
            "input",
            f"unable to load model '{model_name}', configuration expects {expected} inputs, "
            f"model provides {len(kinds)}; forward() of {path.name} takes {len(kinds)} "
            "tensor argument(s): configure that many inputs",
        )
    ]


def _expected_input_count(config: ModelConfig) -> int:
    """Configured inputs plus ``batch_input``, sequence controls and states (both backends)."""
    sequence = config.sequence_batching
    kinds = {c.kind for entry in sequence.control_input for c in entry.control}
    controls = len(kinds & _COUNTED_CONTROLS)
    return len(config.input) + len(config.batch_input) + controls + len(sequence.state)
