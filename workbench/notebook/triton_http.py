"""The facade's link to a server: Triton's public HTTP API through ``tritonclient.http``.

Nothing here knows it talks to the embedded server, so the same calls work against a real
tritonserver. Server errors become the library's error categories, with Triton's HTTP status
and message kept in the text.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import tritonclient.http as httpclient
from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.utils import InferenceServerException

from workbench.config import from_json, to_json_dict
from workbench.config.dtypes import numpy_dtype, wire_from_numpy
from workbench.errors import (
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    WorkbenchError,
)

T = TypeVar("T")

_STATUS_ERRORS: dict[str, type[WorkbenchError]] = {
    "400": InvalidArgumentError,
    "404": NotFoundError,
    "500": InternalError,
    "503": UnavailableError,
}

#: statistics durations shown per request, in microseconds
STAT_PHASES = ("queue", "compute_input", "compute_infer", "compute_output")
STATS_COLUMNS = (
    "name",
    "version",
    "inference_count",
    "execution_count",
    "success",
    "fail",
    *(f"{phase}_us" for phase in STAT_PHASES),
    "cache_hit",
    "cache_miss",
    "last_inference",
)


def server_error(exc: InferenceServerException) -> WorkbenchError:
    """The library's error for a server reply: category from the status, Triton's text kept."""
    status = str(exc.status() or "")
    category = _STATUS_ERRORS.get(status, WorkbenchError)
    message = exc.message() or str(exc)
    error = category(f"[{status}] {message}" if status else message)
    error.status = int(status) if status.isdigit() else None
    return error


class TritonHttp:
    """A thread-safe wrapper of one ``tritonclient.http`` client, returning plain values."""

    def __init__(self, address: str, timeout_s: float = 300.0) -> None:
        self.address = address
        self._client = httpclient.InferenceServerClient(
            url=address, connection_timeout=timeout_s, network_timeout=timeout_s
        )
        # geventhttpclient connections are not safe to share between threads.
        self._lock = threading.Lock()

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._lock:
            try:
                return method(self._client, *args, **kwargs)
            except InferenceServerException as exc:
                raise server_error(exc) from None

    def close(self) -> None:
        with self._lock:
            self._client.close()

    # -- models --------------------------------------------------------------------------------
    def index(self) -> list[dict[str, Any]]:
        return list(self.call(httpclient.InferenceServerClient.get_model_repository_index))

    def config(self, name: str, version: str = "") -> ModelConfig:
        data = self.call(httpclient.InferenceServerClient.get_model_config, name, version)
        return from_json(data)

    def metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return dict(self.call(httpclient.InferenceServerClient.get_model_metadata, name, version))

    def load(self, name: str, config: ModelConfig | None = None) -> None:
        text = json.dumps(to_json_dict(config)) if config is not None else None
        self.call(httpclient.InferenceServerClient.load_model, name, config=text)

    def unload(self, name: str) -> None:
        self.call(httpclient.InferenceServerClient.unload_model, name)

    def reason(self, name: str) -> str:
        """Why ``name`` is not serving, as the repository index says ("" when it gives none)."""
        return "; ".join(
            entry.get("reason", "") for entry in self.index() if entry.get("name") == name
        ).strip("; ")

    # -- inference and statistics --------------------------------------------------------------
    def infer(
        self,
        name: str,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> dict[str, np.ndarray]:
        """Send ``inputs`` (cast to the declared types where that loses nothing) and return the
        requested outputs (all the model's outputs by default) as numpy arrays."""
        metadata = self.metadata(name, version)
        declared = {t["name"]: t["datatype"] for t in metadata.get("inputs", [])}
        wanted = list(outputs) if outputs is not None else [t["name"] for t in metadata["outputs"]]
        request = [_infer_input(key, value, declared.get(key)) for key, value in inputs.items()]
        requested = [httpclient.InferRequestedOutput(o, binary_data=True) for o in wanted]
        result = self.call(
            httpclient.InferenceServerClient.infer,
            name,
            request,
            model_version=version,
            outputs=requested,
        )
        return {output: result.as_numpy(output) for output in wanted}

    def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        data = self.call(httpclient.InferenceServerClient.get_inference_statistics, name, version)
        return [_stats_row(entry) for entry in data.get("model_stats", [])]


def _infer_input(name: str, value: Any, declared: str | None) -> httpclient.InferInput:
    array = _as_array(name, value, declared)
    datatype = declared if declared is not None else _wire_type(name, array)
    tensor = httpclient.InferInput(name, list(array.shape), datatype)
    try:
        tensor.set_data_from_numpy(array, binary_data=True)
    except InferenceServerException as exc:
        raise InvalidArgumentError(f"input '{name}': {exc.message()}") from None
    return tensor


def _as_array(name: str, value: Any, declared: str | None) -> np.ndarray:
    array = np.asarray(value)
    if declared == "BYTES" or array.dtype.kind in ("U", "S"):
        return np.array(
            [v.encode("utf-8") if isinstance(v, str) else v for v in array.reshape(-1)],
            dtype=np.object_,
        ).reshape(array.shape)
    if declared is None:
        return array
    target = numpy_dtype(declared)
    # Safe widening/narrowing within a kind (float64 -> FP32); anything else is the server's
    # to refuse, with Triton's own message.
    if array.dtype != target and np.can_cast(array.dtype, target, "same_kind"):
        return array.astype(target)
    return array


def _wire_type(name: str, array: np.ndarray) -> str:
    try:
        return wire_from_numpy(array.dtype)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"input '{name}': {exc}") from None


def _stats_row(entry: Mapping[str, Any]) -> dict[str, Any]:
    stats = entry.get("inference_stats", {})
    success = int(stats.get("success", {}).get("count", 0))
    row: dict[str, Any] = {
        "name": entry.get("name", ""),
        "version": entry.get("version", ""),
        "inference_count": int(entry.get("inference_count", 0)),
        "execution_count": int(entry.get("execution_count", 0)),
        "success": success,
        "fail": int(stats.get("fail", {}).get("count", 0)),
        "cache_hit": int(stats.get("cache_hit", {}).get("count", 0)),
        "cache_miss": int(stats.get("cache_miss", {}).get("count", 0)),
        "last_inference": int(entry.get("last_inference", 0)),
    }
    for phase in STAT_PHASES:
        duration = stats.get(phase, {})
        count = int(duration.get("count", 0))
        row[f"{phase}_us"] = int(duration.get("ns", 0)) / count / 1000 if count else 0.0
    return row


__all__ = ["STATS_COLUMNS", "TritonHttp", "server_error"]
