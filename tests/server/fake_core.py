"""A small stand-in for ``InferenceCore`` with the same methods, for front-end tests.

Models: ``add_one`` (FP32 [-1, 16], batching), ``strings`` (BYTES [-1], upper-cases),
``echo_bytes`` (BYTES [1], no batching), ``scores`` (FP32 [-1, 4] with labels), ``half``
(FP16 [4]), ``two_in`` (two inputs) and three decoupled ones, served by ``infer_stream``:
``decoupled`` (echo, then a bare final flag), ``repeat`` (``COUNT`` responses ``OUT`` = 0..n-1,
then a bare final flag, like ``tests/assets/scheduling_repo/decoupled_repeat``) and ``tokens``
(one ``text_output`` per word of ``text_input``, the last one final).

``repeat`` obeys request parameters, for the front end's error and disconnect paths:
``fail_at`` (raise ``InternalError`` instead of response ``i``), ``final_in_last`` (no bare
flag: the last response is final), ``hang`` (after the first response, wait until closed).
Each stream's name goes to ``streams_closed`` once the front end closes it (or it ends).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from workbench._types import Tensor
from workbench.core.contract import ServingCore
from workbench.core.model import model_metadata
from workbench.core.request import InferRequest, InferResponse
from workbench.core.request_checks import RequestChecker
from workbench.errors import InternalError, InvalidArgumentError, NotFoundError, UnavailableError

Compute = Callable[[dict[str, Tensor]], list[Tensor]]
Stream = Callable[[InferRequest], AsyncIterator[InferResponse]]


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
    "repeat": (
        {
            "model_transaction_policy": {"decoupled": True},
            "input": [_io("COUNT", "TYPE_INT32", [1])],
            "output": [_io("OUT", "TYPE_INT32", [1])],
        },
        _echo,
    ),
    "tokens": (
        {
            "model_transaction_policy": {"decoupled": True},
            "input": [_io("text_input", "TYPE_STRING", [1])],
            "output": [_io("text_output", "TYPE_STRING", [1])],
        },
        _echo,
    ),
}
LABELS = ["cat", "dog", "bird", "fish"]


def _response(request: InferRequest, *outputs: Tensor, final: bool = False) -> InferResponse:
    return InferResponse(request.model_name, "1", request.id, list(outputs), final=final)


async def _echo_stream(request: InferRequest) -> AsyncIterator[InferResponse]:
    yield _response(request, *_echo(request.inputs))
    yield _response(request, final=True)


async def _repeat_stream(request: InferRequest) -> AsyncIterator[InferResponse]:
    count = int(request.inputs["COUNT"].array.reshape(-1)[0])
    params = request.parameters
    for index in range(count):
        if index == params.get("fail_at"):
            raise InternalError(f"repeat failed at response {index}")
        final = bool(params.get("final_in_last")) and index == count - 1
        yield _response(request, Tensor("OUT", "INT32", np.array([index], np.int32)), final=final)
        if params.get("hang"):
            await asyncio.sleep(30)  # until the front end closes the stream (bounded)
    if count == params.get("fail_at"):
        raise InternalError(f"repeat failed at response {count}")
    if not params.get("final_in_last"):
        yield _response(request, final=True)


async def _tokens_stream(request: InferRequest) -> AsyncIterator[InferResponse]:
    words = request.inputs["text_input"].array.reshape(-1)[0].split()
    for index, word in enumerate(words):
        output = Tensor("text_output", "BYTES", np.array([word], dtype=np.object_))
        yield _response(request, output, final=index == len(words) - 1)


STREAMS: dict[str, Stream] = {
    "decoupled": _echo_stream,
    "repeat": _repeat_stream,
    "tokens": _tokens_stream,
}


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
        self.streams_closed: list[str] = []
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
        return model_metadata(self._get(name, version), [1])

    def model_config(self, name: str, version: str = "") -> model_config_pb2.ModelConfig:
        return self._get(name, version)

    def output_labels(self, name: str, version: str, output: str) -> list[str] | None:
        return LABELS if name == "scores" else None

    async def infer(self, request: InferRequest) -> InferResponse:
        RequestChecker(self._get(request.model_name, request.model_version)).check(request)
        for tensor in request.inputs.values():
            if not tensor.array.flags.c_contiguous and tensor.array.size:
                raise InvalidArgumentError("fake core wants contiguous inputs")
        outputs = self.computes[request.model_name](request.inputs)
        if request.requested_outputs is not None:
            wanted = set(request.requested_outputs)
            outputs = [t for t in outputs if t.name in wanted]
        self.success[request.model_name] = self.success.get(request.model_name, 0) + 1
        return InferResponse(request.model_name, "1", request.id, outputs)

    def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Each response of a decoupled model in turn. As the real core: a request it rejects
        raises at the call; a model's error raises from the iterator (first or mid-stream)."""
        if request.model_name not in STREAMS:
            return self._one(request)
        RequestChecker(self._get(request.model_name, request.model_version)).check(request)
        return self._stream(request)

    async def _one(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        yield await self.infer(request)

    async def _stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        try:
            async for response in STREAMS[request.model_name](request):
                yield response
        finally:
            self.streams_closed.append(request.model_name)

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


def serving_core() -> ServingCore:
    """A ``FakeCore`` typed as the front ends take it (``mypy`` checks that it fits)."""
    return FakeCore()
