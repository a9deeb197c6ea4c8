"""What a model file says about its tensors, read without loading the model to serve it.

The config editor checks a draft against these before it writes anything (``graph_checks``);
a backend can run the same checks at load. ONNX graphs are read with the ``onnx`` package
(``load_external_data=False``: the graph only, no weights from side files), which lists the
inputs onnxruntime reports: graph inputs that are not initializers, plus the *overridable*
initializers (initializers also listed as graph inputs). A TorchScript file tells only its
``forward`` arguments. Every reader returns ``None`` when it cannot tell (the package is not
installed, the file is missing, unreadable or larger than ``INSPECT_LIMIT_BYTES``): the load
itself reports those cases.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config.platforms import BACKEND_PLATFORMS, backend_name

#: files larger than this are not opened just to check a configuration
INSPECT_LIMIT_BYTES = 512 * 2**20

#: ONNX ``TensorProto.DataType`` names that differ from the wire names
_ONNX_TO_WIRE = {
    "FLOAT": "FP32",
    "DOUBLE": "FP64",
    "FLOAT16": "FP16",
    "BFLOAT16": "BF16",
    "STRING": "BYTES",
}
_WIRE_NAMES = frozenset(
    {"BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"}
)


@dataclass(frozen=True)
class GraphTensor:
    """One input or output as the model file declares it; a variable dimension is -1."""

    name: str
    #: wire name (``FP32``, ``BYTES``, ...); ``INVALID`` for types Triton cannot carry
    datatype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class GraphSignature:
    """The inputs and outputs of an ONNX graph, in graph order."""

    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]
    #: initializers that requests may override (they may be configured as inputs too)
    overridable: tuple[GraphTensor, ...] = ()


def model_file(config: ModelConfig, version_path: Path) -> Path | None:
    """The file the config's backend loads from a version folder (``None``: unknown backend)."""
    backend = backend_name(config)
    platforms = BACKEND_PLATFORMS.get(backend, {})
    default = platforms.get(config.platform) or next(iter(platforms.values()), "")
    name = config.default_model_filename or default
    if not name:
        return None
    path = version_path / name
    # onnxruntime also accepts a folder holding model.onnx next to its external data files.
    return path / "model.onnx" if backend == "onnxruntime" and path.is_dir() else path


def onnx_signature(path: Path) -> GraphSignature | None:
    """The I/O of the ONNX graph in ``path``, or ``None`` when it cannot be read here."""
    stamp = _stamp(path)
    return _onnx_signature(path, stamp) if stamp else None


def torchscript_arguments(path: Path) -> tuple[str, ...] | None:
    """The type kinds of ``forward``'s arguments after ``self`` (``"TensorType"``,
    ``"ListType"``, ``"DictType"``, ...), or ``None`` when the file cannot be read here."""
    stamp = _stamp(path)
    return _torchscript_arguments(path, stamp) if stamp else None


def _stamp(path: Path) -> tuple[int, int] | None:
    """(mtime, size) of a file small enough to inspect: the cache key of the readers."""
    try:
        stat = path.stat()
    except OSError:
        return None
    if not path.is_file() or stat.st_size > INSPECT_LIMIT_BYTES:
        return None
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=32)
def _onnx_signature(path: Path, _stamp: tuple[int, int]) -> GraphSignature | None:
    try:
        import onnx
    except ImportError:
        return None
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # onnx raises DecodeError, ValueError, OSError ...
        return None
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = [_graph_tensor(onnx, v) for v in graph.input if v.name not in initializers]
    overridable = [_graph_tensor(onnx, v) for v in graph.input if v.name in initializers]
    outputs = [_graph_tensor(onnx, v) for v in graph.output]
    return GraphSignature(tuple(inputs), tuple(outputs), tuple(overridable))


def _graph_tensor(onnx: Any, value: Any) -> GraphTensor:
    tensor_type = value.type.tensor_type
    if not value.type.HasField("tensor_type"):
        return GraphTensor(value.name, "INVALID", ())
    name = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
    datatype = _ONNX_TO_WIRE.get(name, name if name in _WIRE_NAMES else "INVALID")
    dims = tuple(
        dim.dim_value if dim.HasField("dim_value") else -1 for dim in tensor_type.shape.dim
    )
    return GraphTensor(value.name, datatype, dims)


@functools.lru_cache(maxsize=8)
def _torchscript_arguments(path: Path, _stamp: tuple[int, int]) -> tuple[str, ...] | None:
    try:
        import torch
    except ImportError:
        return None
    try:
        with warnings.catch_warnings():
            # TorchScript is deprecated in torch, but it is what Triton's libtorch serves.
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
        arguments = module.forward.schema.arguments
    except Exception:  # torch raises RuntimeError and friends; no schema: not scripted
        return None
    kinds = [str(argument.type.kind()) for argument in arguments]
    # Triton skips a first argument of class type: the module itself (``self``).
    return tuple(kinds[1:] if kinds[:1] == ["ClassType"] else kinds)


__all__ = [
    "INSPECT_LIMIT_BYTES",
    "GraphSignature",
    "GraphTensor",
    "model_file",
    "onnx_signature",
    "torchscript_arguments",
]
