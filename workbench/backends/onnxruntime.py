"""The ``onnxruntime`` backend (``platform: "onnxruntime_onnx"``), on onnxruntime's Python API.

Auto-complete follows Triton's onnxruntime backend: inputs and outputs come from the graph,
and a graph whose every input and output has a variable first dimension gets
``max_batch_size: 4`` (Triton's ``default-max-batch-size``) and a dynamic batcher.
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
    to_str_array,
)
from workbench.backends.base import ExecRequest, ExecResult, InstanceContext, fail_all
from workbench.config.dtypes import wire_to_config_enum
from workbench.config.graph_checks import onnx_problems
from workbench.config.model_files import GraphSignature, GraphTensor
from workbench.errors import (
    ConfigError,
    InternalError,
    InvalidArgumentError,
    MissingDependencyError,
    UnavailableError,
    WorkbenchError,
)

#: Triton's ``--backend-config=default-max-batch-size`` default
DEFAULT_MAX_BATCH_SIZE = 4

#: onnxruntime's type strings -> wire datatypes
_ORT_TYPES = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise MissingDependencyError("onnxruntime", "onnx") from None
    return onnxruntime


def _model_file(config: ModelConfig, version_path: Path) -> Path:
    path = version_path / (
        config.default_model_filename or OnnxRuntimeBackend.default_model_filename
    )
    # Triton also accepts a folder holding model.onnx next to its external data files.
    return path / "model.onnx" if path.is_dir() else path


def _tensor_infos(args: Sequence[Any]) -> list[tuple[str, str, list[int]]]:
    """``(name, wire type, dims)`` per graph input/output; symbolic dimensions become -1."""
    infos = []
    for arg in args:
        dims = [d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or [])]
        infos.append((arg.name, _ORT_TYPES.get(arg.type, "INVALID"), dims))
    return infos


class OnnxRuntimeBackend:
    """Triton's onnxruntime backend (``backend: "onnxruntime"``)."""

    name = "onnxruntime"
    default_model_filename = "model.onnx"

    def auto_complete(self, config: ModelConfig, model_path: Path, version_path: Path) -> None:
        """Fill inputs, outputs, ``max_batch_size`` and the batcher from the graph."""
        input_count = len(config.input) + len(config.batch_input)
        if input_count > 0 and len(config.output) > 0:
            return
        session = _session(config.name or model_path.name, _model_file(config, version_path))
        inputs, outputs = _tensor_infos(session.get_inputs()), _tensor_infos(session.get_outputs())
        _complete_max_batch(config, inputs + outputs)
        if input_count == 0:
            _complete_io(config, config.input, inputs)
        if len(config.output) == 0:
            _complete_io(config, config.output, outputs)

    def create_instance(self, context: InstanceContext) -> OnnxRuntimeInstance:
        """Open an ``InferenceSession`` on the device the instance group asks for."""
        model_file = _model_file(context.config, context.version_path)
        providers = _providers(context)
        options = _session_options(context.config)
        session = _session(context.model_name, model_file, providers, options)
        _check_against_graph(context, session)
        return OnnxRuntimeInstance(context, session)


def _check_against_graph(context: InstanceContext, session: Any) -> None:
    """Refuse a config that does not fit the graph, as Triton's backend does when it creates
    the instance (``ValidateInputs``/``ValidateOutputs``): the first problem, Triton's text."""

    def tensors(args: Sequence[Any]) -> tuple[GraphTensor, ...]:
        return tuple(GraphTensor(n, wire, tuple(dims)) for n, wire, dims in _tensor_infos(args))

    signature = GraphSignature(
        inputs=tensors(session.get_inputs()),
        outputs=tensors(session.get_outputs()),
        overridable=tensors(session.get_overridable_initializers()),
    )
    problems = onnx_problems(context.config, signature, model_name=context.model_name)
    if problems:
        raise InvalidArgumentError(problems[0].message)


def _session(name: str, path: Path, providers: list[Any] | None = None, options: Any = None) -> Any:
    ort = _ort()
    if not path.is_file():
        raise UnavailableError(f"model '{name}': unable to find '{path}'")
    try:
        return ort.InferenceSession(
            str(path), sess_options=options, providers=providers or ["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own exception types
        raise InternalError(f"model '{name}': failed to load '{path}': {exc}") from exc


def _complete_max_batch(config: ModelConfig, infos: list[tuple[str, str, list[int]]]) -> None:
    can_batch = all(dims and dims[0] == -1 for _, _, dims in infos)
    if not can_batch:
        if config.max_batch_size != 0:
            raise ConfigError(
                f"autofill failed for model '{config.name}': model does not support batching "
                "while non-zero max_batch_size is specified"
            )
        return
    if config.max_batch_size == 0:
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE
    scheduled = config.HasField("sequence_batching") or config.HasField("dynamic_batching")
    if config.max_batch_size > 1 and not scheduled:
        config.dynamic_batching.SetInParent()


def _complete_io(config: ModelConfig, target: Any, infos: list[tuple[str, str, list[int]]]) -> None:
    for name, wire, dims in infos:
        tensor = target.add(name=name)
        if wire != "INVALID":
            tensor.data_type = wire_to_config_enum(wire)
        kept = dims[1:] if config.max_batch_size > 0 else dims
        if kept:
            tensor.dims.extend(kept)
            continue
        tensor.dims.append(1)
        if config.max_batch_size > 0:
            tensor.reshape.SetInParent()  # an empty reshape: a scalar per batch item


def _providers(context: InstanceContext) -> list[Any]:
    if context.kind != "KIND_GPU":
        return ["CPUExecutionProvider"]
    available = _ort().get_available_providers()
    if "CUDAExecutionProvider" not in available:
        raise UnavailableError(
            f"model '{context.model_name}': instance group KIND_GPU needs onnxruntime's "
            f"CUDAExecutionProvider, which is not available here (available: "
            f"{', '.join(available)}); use KIND_CPU or pip install 'triton-workbench[gpu]'"
        )
    device = {"device_id": context.device_id}
    providers: list[Any] = []
    accelerators = context.config.optimization.execution_accelerators.gpu_execution_accelerator
    wants_trt = any(acc.name == "tensorrt" for acc in accelerators)
    if wants_trt and "TensorrtExecutionProvider" in available:
        providers.append(("TensorrtExecutionProvider", device))
    return providers + [("CUDAExecutionProvider", device), "CPUExecutionProvider"]


def _session_options(config: ModelConfig) -> Any:
    ort = _ort()
    options = ort.SessionOptions()
    params = config.parameters
    for key, attribute in (
        ("intra_op_thread_count", "intra_op_num_threads"),
        ("inter_op_thread_count", "inter_op_num_threads"),
    ):
        if key in params and params[key].string_value.strip():
            setattr(options, attribute, int(params[key].string_value))
    level = config.optimization.graph.level
    if level == -1:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    elif level == 1:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return options


class OnnxRuntimeInstance:
    """One ``InferenceSession``; batches requests along dimension 0 when the model batches."""

    def __init__(self, context: InstanceContext, session: Any) -> None:
        self.context = context
        self.session = session
        self._max_batch_size = context.config.max_batch_size
        self._input_types = {name: wire for name, wire, _ in _tensor_infos(session.get_inputs())}
        # Implicit-state outputs (sequence batching) are fetched too: the core carries them.
        states = [state.output_name for state in context.config.sequence_batching.state]
        configured = [out.name for out in context.config.output] + states
        graph = [arg.name for arg in session.get_outputs()]
        self._output_names = [n for n in graph if n in configured] if configured else graph
        self._declared = declared_output_types(context.config)

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Run the session once for the whole batch (or once per request when unbatched)."""
        return execute_batched(requests, self._max_batch_size, self._run)

    def _run(
        self,
        requests: Sequence[ExecRequest],
        arrays: dict[str, np.ndarray],
        sizes: list[int] | None,
    ) -> list[ExecResult]:
        try:
            # The core has already applied the config's input `reshape` (as Triton's core does).
            feeds = {name: self._feed(name, array) for name, array in arrays.items()}
            values = self.session.run(self._output_names, feeds)
        except WorkbenchError as exc:
            return fail_all(len(requests), exc)
        except Exception as exc:  # onnxruntime's errors carry no common base class
            error = InternalError(
                f"onnxruntime failed for model '{self.context.model_name}': {exc}"
            )
            return fail_all(len(requests), error)
        outputs = dict(zip(self._output_names, values, strict=True))
        return results_from_batch(requests, outputs, self._declared, sizes)

    def _feed(self, name: str, array: np.ndarray) -> np.ndarray:
        wire = self._input_types.get(name)
        if wire is None:
            raise InternalError(f"model '{self.context.model_name}' has no input '{name}'")
        if wire == "BYTES":
            return to_str_array(array)
        return array

    def close(self) -> None:
        """Drop the session."""
        self.session = None
