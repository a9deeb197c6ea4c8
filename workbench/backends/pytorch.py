"""The ``pytorch`` backend (``platform: "pytorch_libtorch"``): TorchScript models.

Inputs reach ``forward`` as Triton's libtorch backend passes them: by ``forward`` argument
name when every configured input is one, else by the ``<name>__<index>`` convention, else in
configuration order. Outputs are picked from the returned tuple by ``__<index>`` or, failing
that, by configuration order.

Implicit state (``sequence_batching.state``) is bound like one more input and output, by its
``__<index>``: as in Triton's backend (``ValidateInputs``/``ValidateOutputs`` in
``src/pt/model_instance_state.cc``), a model with state must name every input, output and
state ``<name>__<index>``, or it does not load.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import TYPE_BF16, ModelConfig

from workbench.backends._batching import (
    declared_output_types,
    execute_batched,
    results_from_batch,
)
from workbench.backends.base import ExecRequest, ExecResult, InstanceContext, fail_all
from workbench.errors import (
    InternalError,
    InvalidArgumentError,
    MissingDependencyError,
    UnavailableError,
    UnsupportedError,
    WorkbenchError,
)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("torch", "torch") from None
    return torch


def input_positions(names: Sequence[str], forward_args: Sequence[str]) -> dict[str, int]:
    """Input name -> position in ``forward(...)``, by Triton's libtorch naming rules."""
    if all(name in forward_args for name in names):
        return {name: list(forward_args).index(name) for name in names}
    return _named_index_or_order(names)


def output_positions(names: Sequence[str]) -> dict[str, int]:
    """Output name -> index in the returned tuple (``<name>__<index>``, else config order)."""
    return _named_index_or_order(names)


def _named_index_or_order(names: Sequence[str]) -> dict[str, int]:
    """``<name>__<index>`` positions, or config order as soon as one name breaks the rule."""
    indices = [_named_index(name) for name in names]
    if all(index is not None for index in indices):
        return {
            name: index for name, index in zip(names, indices, strict=True) if index is not None
        }
    return {name: index for index, name in enumerate(names)}


def _named_index(name: str) -> int | None:
    """The ``<index>`` of ``<name>__<index>`` (from the first ``__``, as Triton reads it)."""
    position = name.find("__")
    rest = name[position + 2 :] if position >= 0 else ""
    return int(rest) if rest.isdigit() else None


class PyTorchBackend:
    """Triton's libtorch backend (``backend: "pytorch"``) for TorchScript files."""

    name = "pytorch"
    default_model_filename = "model.pt"

    def auto_complete(self, config: ModelConfig, model_path: Path, version_path: Path) -> None:
        """Nothing to infer: TorchScript files carry no tensor signature (as in Triton)."""

    def create_instance(self, context: InstanceContext) -> PyTorchInstance:
        """``torch.jit.load`` the model onto the instance's device."""
        torch = _torch()
        name = context.config.default_model_filename or self.default_model_filename
        path = context.version_path / name
        if not path.is_file():
            raise UnavailableError(f"model '{context.model_name}': unable to find '{path}'")
        device = _device(torch, context)
        try:
            with warnings.catch_warnings():
                # TorchScript is deprecated in torch, but it is what Triton's libtorch serves.
                warnings.simplefilter("ignore", DeprecationWarning)
                module = torch.jit.load(str(path), map_location=device)
        except Exception as exc:  # torch raises RuntimeError and friends
            raise InternalError(
                f"model '{context.model_name}': failed to load '{path}': {exc}"
            ) from exc
        module.eval()
        return PyTorchInstance(context, module, device)


def _require_named_index(model: str, named: bool, states: Sequence[Any]) -> None:
    """Triton's refusal of a model with state whose tensors are not all ``<name>__<index>``
    (``named``: the inputs and outputs are bound by that convention)."""
    if not named:
        raise InvalidArgumentError(
            f"PyTorch model '{model}' is using sequence batching with state but not all inputs "
            "and outputs follow the <name>__<index> naming convention. "
        )
    for state in states:
        for name in (state.input_name, state.output_name):
            if _named_index(name) is None:
                raise InvalidArgumentError(
                    f"PyTorch model '{model}' is using sequence batching with state but state "
                    f"'{name}' does not follow the <name>__<index> naming convention. "
                )


def _state_index(name: str) -> int:
    index = _named_index(name)
    assert index is not None  # checked by _require_named_index
    return index


def _device(torch: Any, context: InstanceContext) -> Any:
    if context.kind != "KIND_GPU":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UnavailableError(
            f"model '{context.model_name}': instance group KIND_GPU needs a CUDA build of torch "
            "and an NVIDIA GPU; none was found (use KIND_CPU)"
        )
    return torch.device(f"cuda:{context.device_id}")


def _forward_arguments(module: Any) -> list[str]:
    try:
        arguments = module.forward.schema.arguments
    except AttributeError:  # not a scripted forward: fall back to the naming convention
        return []
    return [arg.name for arg in arguments if arg.name != "self"]


class PyTorchInstance:
    """One loaded TorchScript module on one device."""

    def __init__(self, context: InstanceContext, module: Any, device: Any) -> None:
        config = context.config
        self.context = context
        self.module = module
        self.device = device
        self._torch = _torch()
        arguments = _forward_arguments(module)
        self._inputs = input_positions([i.name for i in config.input], arguments)
        self._outputs = output_positions([o.name for o in config.output])
        states = list(config.sequence_batching.state)
        if states:
            # inputs bound by argument name follow Triton's FORWARD_ARGUMENT convention
            by_argument = all(name in arguments for name in self._inputs)
            names = [*self._inputs, *self._outputs]
            named = not by_argument and all(_named_index(n) is not None for n in names)
            _require_named_index(config.name, named, states)
            self._inputs |= {s.input_name: _state_index(s.input_name) for s in states}
            self._outputs |= {s.output_name: _state_index(s.output_name) for s in states}
        self._bf16 = {i.name for i in config.input if i.data_type == TYPE_BF16}
        self._bf16 |= {s.input_name for s in states if s.data_type == TYPE_BF16}
        self._declared = declared_output_types(config)
        self._max_batch_size = config.max_batch_size

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Run ``forward`` once for the whole batch (or once per request when unbatched)."""
        return execute_batched(requests, self._max_batch_size, self._run)

    def _run(
        self,
        requests: Sequence[ExecRequest],
        arrays: dict[str, np.ndarray],
        sizes: list[int] | None,
    ) -> list[ExecResult]:
        try:
            args = self._arguments(arrays)
            with self._torch.inference_mode():
                returned = self.module(*args)
            outputs = self._collect(returned)
        except WorkbenchError as exc:
            return fail_all(len(requests), exc)
        except Exception as exc:  # TorchScript raises torch.jit.Error, RuntimeError, ...
            error = InternalError(f"PyTorch execute failure for '{self.context.model_name}': {exc}")
            return fail_all(len(requests), error)
        return results_from_batch(requests, outputs, self._declared, sizes)

    def _arguments(self, arrays: dict[str, np.ndarray]) -> list[Any]:
        args: list[Any] = [None] * len(self._inputs)
        for name, array in arrays.items():
            if name not in self._inputs:
                raise InternalError(f"model '{self.context.model_name}' has no input '{name}'")
            index = self._inputs[name]
            if index >= len(args):
                raise InternalError(f"input '{name}' has index {index} beyond the inputs")
            args[index] = self._to_torch(array, bf16=name in self._bf16)
        return args

    def _to_torch(self, array: np.ndarray, *, bf16: bool) -> Any:
        torch = self._torch
        if array.dtype == np.object_:
            raise UnsupportedError("string tensors are not supported by the pytorch backend yet")
        if not array.flags.writeable or not array.flags.c_contiguous:
            array = np.array(array, copy=True, order="C")
        if bf16:
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to(self.device)
        return torch.from_numpy(array).to(self.device)

    def _collect(self, returned: Any) -> dict[str, np.ndarray]:
        values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
        outputs = {}
        for name, index in self._outputs.items():
            if index >= len(values):
                raise InternalError(
                    f"model '{self.context.model_name}' returned {len(values)} outputs; "
                    f"output '{name}' expects index {index}"
                )
            outputs[name] = self._to_numpy(values[index])
        return outputs

    def _to_numpy(self, tensor: Any) -> np.ndarray:
        torch = self._torch
        tensor = tensor.detach().cpu().contiguous()
        if tensor.dtype == torch.bfloat16:
            return np.asarray(tensor.view(torch.int16).numpy().view(np.uint16))
        return np.asarray(tensor.numpy())

    def close(self) -> None:
        """Drop the module (and the GPU cache it held)."""
        self.module = None
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()
