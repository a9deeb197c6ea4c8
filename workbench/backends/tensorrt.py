"""The ``tensorrt`` backend (``platform: "tensorrt_plan"``): serialized TensorRT engines.

GPU only, and best effort: it needs an NVIDIA GPU, the ``tensorrt`` Python package (10.x
tensor API) and a CUDA build of torch, whose tensors serve as the I/O buffers. It is
untested on CPU machines, where ``create_instance`` raises ``UnavailableError`` with the
reason; importing this module never needs any of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends._batching import (
    declared_output_types,
    execute_batched,
    results_from_batch,
)
from workbench.backends.base import ExecRequest, ExecResult, InstanceContext, fail_all
from workbench.errors import InternalError, UnavailableError


def _cuda_torch() -> Any | None:
    """torch when it is installed with CUDA and sees a GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def gpu_present() -> bool:
    """Whether this machine shows an NVIDIA GPU (driver device node or CUDA torch)."""
    return Path("/dev/nvidia0").exists() or _cuda_torch() is not None


def _tensorrt(model_name: str) -> Any:
    try:
        import tensorrt
    except ImportError:
        raise UnavailableError(
            f"model '{model_name}': tensorrt is not installed; install it with: "
            "pip install 'triton-workbench[gpu]'"
        ) from None
    return tensorrt


class TensorRTBackend:
    """Triton's TensorRT backend (``backend: "tensorrt"``)."""

    name = "tensorrt"
    default_model_filename = "model.plan"

    def auto_complete(self, config: ModelConfig, model_path: Path, version_path: Path) -> None:
        """Not implemented: engines must come with a complete configuration here."""

    def create_instance(self, context: InstanceContext) -> TensorRTInstance:
        """Deserialize the engine for the instance's GPU."""
        name = context.model_name
        if not gpu_present():
            raise UnavailableError(f"model '{name}': TensorRT needs an NVIDIA GPU; none was found")
        trt = _tensorrt(name)
        torch = _cuda_torch()
        if torch is None:
            raise UnavailableError(
                f"model '{name}': the tensorrt backend needs a CUDA build of torch for its I/O "
                "buffers: pip install 'triton-workbench[torch]'"
            )
        torch.cuda.set_device(context.device_id)
        path = context.version_path / _engine_file(context.config, torch, context.device_id)
        if not path.is_file():
            raise UnavailableError(f"model '{name}': unable to find '{path}'")
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            raise InternalError(f"model '{name}': unable to deserialize TensorRT engine '{path}'")
        return TensorRTInstance(context, trt, torch, engine)


def _engine_file(config: ModelConfig, torch: Any, device_id: int) -> str:
    """``cc_model_filenames`` entry for the GPU's compute capability, else the default name."""
    major, minor = torch.cuda.get_device_capability(device_id)
    by_capability = config.cc_model_filenames.get(f"{major}.{minor}")
    return by_capability or config.default_model_filename or TensorRTBackend.default_model_filename


class TensorRTInstance:
    """One execution context of an engine, run on a private CUDA stream."""

    def __init__(self, context: InstanceContext, trt: Any, torch: Any, engine: Any) -> None:
        self.context = context
        self._trt, self._torch = trt, torch
        self.engine = engine
        self.execution = engine.create_execution_context()
        self.stream = torch.cuda.Stream(device=context.device_id)
        self.device = torch.device(f"cuda:{context.device_id}")
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_input = [engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names]
        self._inputs = [n for n, flag in zip(names, is_input, strict=True) if flag]
        self._outputs = [n for n, flag in zip(names, is_input, strict=True) if not flag]
        self._declared = declared_output_types(context.config)
        self._max_batch_size = context.config.max_batch_size

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Run the engine once for the whole batch (or once per request when unbatched)."""
        return execute_batched(requests, self._max_batch_size, self._run)

    def _run(
        self,
        requests: Sequence[ExecRequest],
        arrays: dict[str, np.ndarray],
        sizes: list[int] | None,
    ) -> list[ExecResult]:
        try:
            inputs = [self._bind_input(name, arrays[name]) for name in self._inputs]
            buffers = {name: self._bind_output(name) for name in self._outputs}
            if not self.execution.execute_async_v3(self.stream.cuda_stream):
                raise InternalError(f"TensorRT execution failed for '{self.context.model_name}'")
            self.stream.synchronize()
            del inputs  # input buffers must outlive the asynchronous run
            outputs = {name: buf.cpu().numpy() for name, buf in buffers.items()}
        except (KeyError, RuntimeError, InternalError) as exc:
            error = InternalError(f"model '{self.context.model_name}': {exc}")
            return fail_all(len(requests), error)
        return results_from_batch(requests, outputs, self._declared, sizes)

    def _bind_input(self, name: str, array: np.ndarray) -> Any:
        tensor = self._torch.from_numpy(np.array(array, copy=True)).to(self.device)
        self.execution.set_input_shape(name, tuple(array.shape))
        self.execution.set_tensor_address(name, tensor.data_ptr())
        return tensor  # the caller keeps it alive until the run completes

    def _bind_output(self, name: str) -> Any:
        shape = tuple(self.execution.get_tensor_shape(name))
        np_type = self._trt.nptype(self.engine.get_tensor_dtype(name))
        dtype = self._torch.from_numpy(np.empty(0, dtype=np_type)).dtype
        buffer = self._torch.empty(shape, dtype=dtype, device=self.device)
        self.execution.set_tensor_address(name, buffer.data_ptr())
        return buffer

    def close(self) -> None:
        """Release the execution context and the engine."""
        self.execution = None
        self.engine = None
