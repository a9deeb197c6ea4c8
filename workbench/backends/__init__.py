"""Backends: turn a model folder into instances that execute batches of requests.

``get_backend("onnxruntime")`` imports a backend module only when it is first asked for, so
importing ``workbench`` never pulls in torch or onnxruntime.
"""

from __future__ import annotations

import importlib
import threading

from tritonclient.grpc import model_config_pb2

from workbench.backends.base import (
    Backend,
    ExecRequest,
    ExecResult,
    InferenceClient,
    InstanceContext,
    ModelInstance,
)
from workbench.errors import UnsupportedError

#: backend name -> "module:class", imported on first use
_REGISTRY = {
    "python": "workbench.backends.python:PythonBackend",
    "onnxruntime": "workbench.backends.onnxruntime:OnnxRuntimeBackend",
    "pytorch": "workbench.backends.pytorch:PyTorchBackend",
    "tensorrt": "workbench.backends.tensorrt:TensorRTBackend",
}

#: Triton's ``platform`` values and the backend that serves each
_PLATFORMS = {
    "onnxruntime_onnx": "onnxruntime",
    "pytorch_libtorch": "pytorch",
    "tensorrt_plan": "tensorrt",
}

_instances: dict[str, Backend] = {}
_lock = threading.Lock()


def get_backend(name: str) -> Backend:
    """The backend called ``name`` (one shared object per name)."""
    if name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY))
        raise UnsupportedError(f"unknown backend '{name}'; known backends: {known}")
    with _lock:
        if name not in _instances:
            module_name, _, class_name = _REGISTRY[name].partition(":")
            backend_class = getattr(importlib.import_module(module_name), class_name)
            _instances[name] = backend_class()
        return _instances[name]


def backend_for(config: model_config_pb2.ModelConfig) -> str:
    """The backend name a configuration asks for, from ``backend`` or else ``platform``."""
    if config.backend:
        return config.backend
    if config.platform in _PLATFORMS:
        return _PLATFORMS[config.platform]
    if config.platform == "ensemble":
        raise UnsupportedError(
            f"model '{config.name}': ensembles are scheduled by the core, not a backend"
        )
    raise UnsupportedError(
        f"model '{config.name}': unknown platform '{config.platform}' and no backend set"
    )


__all__ = [
    "Backend",
    "ExecRequest",
    "ExecResult",
    "InferenceClient",
    "InstanceContext",
    "ModelInstance",
    "backend_for",
    "get_backend",
]
