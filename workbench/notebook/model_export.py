"""From "a model in my notebook" to a model folder Triton serves: ONNX files and torch modules.

Each function writes ``<repository>/<name>/<version>/model.<ext>`` plus a generated
``config.pbtxt`` that passes the server's validator, building the folder next to its final
place and renaming it in, so a server never sees half of it. torch and onnxruntime are imported
only here, and only when called.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench._types import StrPath
from workbench.backends.onnxruntime import OnnxRuntimeBackend
from workbench.config import check, write_config
from workbench.config.dtypes import wire_to_config_enum
from workbench.errors import AlreadyExistsError, InvalidArgumentError, MissingDependencyError

VIA = ("onnx", "torchscript")

#: torch dtype names (``str(dtype)`` without ``torch.``) -> wire data types
_TORCH_TYPES = {
    "bool": "BOOL",
    "uint8": "UINT8",
    "int8": "INT8",
    "int16": "INT16",
    "int32": "INT32",
    "int64": "INT64",
    "float16": "FP16",
    "float32": "FP32",
    "float64": "FP64",
    "bfloat16": "BF16",
}


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", "torch") from None
    return torch


def export_onnx(
    path: StrPath,
    repository: StrPath,
    name: str,
    *,
    max_batch_size: int | None = None,
    version: int = 1,
    overwrite: bool = False,
) -> Path:
    """Copy an ONNX file into the repository with a config read from its graph.

    ``max_batch_size=None`` lets the graph decide, as Triton's auto-complete does (4 when every
    tensor has a variable first dimension, else 0). Returns the model folder.
    """
    data = Path(path).read_bytes()
    return _write_model(repository, name, version, overwrite, "model.onnx", data, max_batch_size)


def export_torch(
    module: Any,
    example_inputs: Any,
    repository: StrPath,
    name: str,
    *,
    via: str = "onnx",
    max_batch_size: int = 8,
    version: int = 1,
    overwrite: bool = False,
) -> Path:
    """Export a ``torch.nn.Module`` as ONNX (``via="onnx"``) or TorchScript (``"torchscript"``).

    ``example_inputs`` is a tensor or a tuple of tensors; with ``max_batch_size > 0`` their
    first dimension is the batch. Tensors are named ``INPUT0``/``OUTPUT0`` (ONNX) or
    ``INPUT__0``/``OUTPUT__0`` (TorchScript, the libtorch backend's convention).
    """
    if via not in VIA:
        raise InvalidArgumentError(f"via must be 'onnx' or 'torchscript', got {via!r}")
    torch = _torch()
    inputs = _example_tuple(torch, example_inputs, max_batch_size)
    was_training = getattr(module, "training", False)
    if was_training:
        module.eval()  # dropout/batch-norm in training mode would not serve deterministic outputs
    try:
        with torch.no_grad():
            outputs = _output_tuple(torch, module(*inputs))
            if via == "onnx":
                data = _onnx_bytes(torch, module, inputs, len(outputs), max_batch_size)
                return _write_model(
                    repository, name, version, overwrite, "model.onnx", data, max_batch_size
                )
            data = _torchscript_bytes(torch, module, inputs)
    finally:
        if was_training:
            module.train()
    config = _torchscript_config(name, inputs, outputs, max_batch_size)
    return _write_model(repository, name, version, overwrite, "model.pt", data, config=config)


def _example_tuple(torch: Any, example_inputs: Any, max_batch_size: int) -> tuple[Any, ...]:
    inputs = (
        tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    )
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise InvalidArgumentError("example_inputs must be a tensor or a tuple of tensors")
    if max_batch_size > 0 and any(t.dim() == 0 for t in inputs):
        raise InvalidArgumentError(
            "with max_batch_size > 0 every example input needs a leading batch dimension; "
            "add one (x.unsqueeze(0)) or pass max_batch_size=0"
        )
    return inputs


def _output_tuple(torch: Any, result: Any) -> tuple[Any, ...]:
    outputs = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if not all(isinstance(t, torch.Tensor) for t in outputs):
        raise InvalidArgumentError(
            "the module must return a tensor or a tuple of tensors to be served"
        )
    return outputs


def _onnx_bytes(
    torch: Any, module: Any, inputs: tuple[Any, ...], output_count: int, max_batch_size: int
) -> bytes:
    input_names = [f"INPUT{i}" for i in range(len(inputs))]
    output_names = [f"OUTPUT{i}" for i in range(output_count)]
    dynamic = (
        {tensor: {0: "batch"} for tensor in input_names + output_names}
        if max_batch_size > 0
        else None
    )
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # The TorchScript-based exporter needs no onnxscript; torch marks it deprecated.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        torch.onnx.export(
            module,
            inputs,
            buffer,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic,
            opset_version=17,
            dynamo=False,
        )
    return buffer.getvalue()


def _torchscript_bytes(torch: Any, module: Any, inputs: tuple[Any, ...]) -> bytes:
    scripted = module if isinstance(module, torch.jit.ScriptModule) else None
    if scripted is None:
        with warnings.catch_warnings():
            # torch marks TorchScript deprecated, but it is what the libtorch backend serves.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            scripted = torch.jit.trace(module, inputs)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def _torchscript_config(
    name: str, inputs: Sequence[Any], outputs: Sequence[Any], max_batch_size: int
) -> ModelConfig:
    config = ModelConfig(name=name, platform="pytorch_libtorch", max_batch_size=max_batch_size)
    for prefix, target, tensors in (
        ("INPUT", config.input, inputs),
        ("OUTPUT", config.output, outputs),
    ):
        for index, tensor in enumerate(tensors):
            dims = list(tensor.shape)[1:] if max_batch_size > 0 else list(tensor.shape)
            entry = target.add(name=f"{prefix}__{index}", dims=dims or [1])
            entry.data_type = wire_to_config_enum(_torch_wire_type(tensor))
            if not dims:
                entry.reshape.SetInParent()  # a scalar per batch item
    return config


def _torch_wire_type(tensor: Any) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    if dtype not in _TORCH_TYPES:
        raise InvalidArgumentError(f"torch dtype {dtype} has no Triton data type")
    return _TORCH_TYPES[dtype]


def _onnx_config(name: str, version_dir: Path, max_batch_size: int | None) -> ModelConfig:
    """Inputs, outputs and batching from the graph, through the backend's auto-complete."""
    config = ModelConfig(name=name, backend="onnxruntime")
    if max_batch_size is not None:
        config.max_batch_size = max_batch_size
    OnnxRuntimeBackend().auto_complete(config, version_dir.parent, version_dir)
    return config


def _write_model(
    repository: StrPath,
    name: str,
    version: int,
    overwrite: bool,
    filename: str,
    data: bytes,
    max_batch_size: int | None = None,
    *,
    config: ModelConfig | None = None,
) -> Path:
    """Build the folder beside its target, check its config, then rename it into place."""
    root = Path(repository)
    target = root / name
    if target.exists() and not overwrite:
        raise AlreadyExistsError(
            f"model folder '{target}' already exists; pass overwrite=True to replace it"
        )
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root)) / name
    try:
        version_dir = staging / str(version)
        version_dir.mkdir(parents=True)
        (version_dir / filename).write_bytes(data)
        if config is None:
            config = _onnx_config(name, version_dir, max_batch_size)
        if not config.instance_group:
            config.instance_group.add(count=1, kind=ModelInstanceGroup.KIND_CPU)
        check(config, model_name=name, model_path=staging)
        write_config(config, staging / "config.pbtxt", backup=False)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging.parent, ignore_errors=True)
    return target


__all__ = ["VIA", "export_onnx", "export_torch"]
