"""A small stand-in for ``InferenceCore`` with the same methods, for front-end tests.

Models: ``add_one`` (FP32 [-1, 16], batching), ``strings`` (BYTES [-1], upper-cases),
``echo_bytes`` (BYTES [1], no batching), ``scores`` (FP32 [-1, 4] with labels), ``half``
(FP16 [4]), ``two_in`` (two inputs) and ``decoupled``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from workbench._types import Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError, NotFoundError, UnavailableError

Compute = Callable[[dict[str, Tensor]], list[Tensor]]


def _config(text: dict[str, Any]) -> model_config_pb2.ModelConfig:
    return json_format.ParseDict(text, model_config_pb2.ModelConfig())


def _io(name: str, dtype: str, dims: list[int], **extra: Any) -> dict[str, Any]:
    return {"name": name, "data_type": dtype, "dims": dims, **extra}


def _add_one(inputs: dict[str, Tensor]) -> list[Tensor]:
    return [Tensor("OUTPUT0", "FP32", inputs["INPUT0"].array + np.float32(1))]


def _upper(inputs: dict[str, Tensor]) -> list[Tensor]:
    values = inputs["INPUT0"].array
    out = np.array([v.upper() for v in values.reshape(-1)], dtype=np.object_)
    return [Tensor("OUTPUT0", "BYTES", out.reshape(values.shape))]


def _echo(inputs: dict[str, Tensor]) -> list[Tensor]:
    tensor = inputs["INPUT0"]
    return [Tensor("OUTPUT0", tensor.datatype, tensor.array)]


def _sum(inputs: dict[str, Tensor]) -> list[Tensor]:
    return [Tensor("SUM", "INT32", inputs["A"].array + inputs["B"].array)]


MODELS: dict[str, tuple[dict[str, Any], Compute]] = {
    "add_one": (
        {
            "max_batch_size": 8,
            "input": [_io("INPUT0", "TYPE_FP32", [16])],
            "output": [_io("OUTPUT0", "TYPE_FP32", [16])],
        },
        _add_one,
    ),
    "strings": (
        {
            "input": [_io("INPUT0", "TYPE_STRING", [-1])],
            "output": [_io("OUTPUT0", "TYPE_STRING", [-1])],
        },
        _upper,
    ),
    "echo_bytes": (
        {
            "input": [_io("INPUT0", "TYPE_STRING", [1])],
            "output": [_io("OUTPUT0", "TYPE_STRING", [1])],
        },
        _echo,
    ),
    "scores": (
        {
            "max_batch_size": 4,
            "input": [_io("INPUT0", "TYPE_FP32", [4])],
            "output": [_io("OUTPUT0", "TYPE_FP32", [4], label_filename="labels.txt")],
        },
        _echo,
    ),
    "half": (
        {
            "input": [_io("INPUT0", "TYPE_FP16", [4])],
            "output": [_io("OUTPUT0", "TYPE_FP16", [4])],
        },
        _echo,
    ),
    "two_in": (
        {
            "input": [_io("A", "TYPE_INT32", [2]), _io("B", "TYPE_INT32", [2])],
            "output": [_io("SUM", "TYPE_INT32", [2])],
        },
        _sum,
    ),
    "decoupled": (
        {
            "model_transaction_policy": {"decoupled": True},
            "input": [_io("INPUT0", "TYPE_FP32", [1])],
            "output": [_io("OUTPUT0", "TYPE_FP32", [1])],
        },
        _echo,
    ),
}
LABELS = ["cat", "dog", "bird", "fish"]


class FakeCore:
    """The ``InferenceCore`` methods the front ends call, over in-memory models."""

    server_name = "triton"
    server_version = "2.51.0"

    def __init__(self) -> None:
        self.live = True
        self.ready = True
        self.configs: dict[str, model_config_pb2.ModelConfig] = {}
        self.computes: dict[str, Compute] = {}
        self.success: dict[str, int] = {}
        self.loads: list[tuple[str, Any, Any]] = []
        for name, (config, compute) in MODELS.items():
            self.configs[name] = _config({"name": name, "backend": "python", **config})
            self.computes[name] = compute

    def _get(self, name: str, version: str) -> model_config_pb2.ModelConfig:
        if name not in self.configs:
            raise NotFoundError(f"Request for unknown model: '{name}' is not found")
        if version not in ("", "1"):
            raise UnavailableError(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return self.configs[name]

    def model_ready(self, name: str, version: str = "") -> bool:
        return name in self.configs and version in ("", "1")

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        self._get(name, version)
        return {"name": name, "versions": ["1"], "platform": "python", "inputs": [], "outputs": []}

    def model_config(self, name: str, version: str = "") -> model_config_pb2.ModelConfig:
        return self._get(name, version)

    def output_labels(self, name: str, version: str, output: str) -> list[str] | None:
        return LABELS if name == "scores" else None

    async def infer(self, request: InferRequest) -> InferResponse:
        self._get(request.model_name, request.model_version)
        for tensor in request.inputs.values():
            if not tensor.array.flags.c_contiguous and tensor.array.size:
                raise InvalidArgumentError("fake core wants contiguous inputs")
        outputs = self.computes[request.model_name](request.inputs)
        if request.requested_outputs is not None:
            wanted = set(request.requested_outputs)
            outputs = [t for t in outputs if t.name in wanted]
        self.success[request.model_name] = self.success.get(request.model_name, 0) + 1
        return InferResponse(request.model_name, "1", request.id, outputs)

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        names = [name] if name else sorted(self.configs)
        for each in names:
            self._get(each, version)
        stats = [
            {
                "name": each,
                "version": "1",
                "inference_count": self.success.get(each, 0),
                "execution_count": self.success.get(each, 0),
                "inference_stats": {"success": {"count": self.success.get(each, 0), "ns": 0}},
                "batch_stats": [],
            }
            for each in names
        ]
        return {"model_stats": stats}

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return [
            {"name": name, "version": "1", "state": "READY", "reason": ""}
            for name in sorted(self.configs)
        ]

    async def load(
        self,
        name: str,
        config_json: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        if config_json is None and name not in self.configs:
            raise NotFoundError(f"failed to load '{name}', failed to poll from model repository")
        self.loads.append((name, config_json, dict(files) if files else None))
        if isinstance(config_json, str):
            config = json.loads(config_json)
            self.configs[name] = _config({"name": name, **config})
            self.computes[name] = _echo

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        self._get(name, "")
        del self.configs[name]
