"""Every HTTP endpoint except ``infer``: health, metadata, config, statistics, repository,
logging, trace settings and shared memory.

Each handler mirrors its ``HTTPAPIServer::Handle*`` counterpart in Triton 2.51's
``src/http_server.cc``: methods, status codes, bodies and error texts.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from workbench.config import to_json_dict as config_to_json
from workbench.core.contract import ServingCore
from workbench.core.trace_settings import TraceManager
from workbench.errors import (
    InternalError,
    InvalidArgumentError,
    UnsupportedError,
    WorkbenchError,
)
from workbench.server.http.messages import (
    EMPTY_OK,
    METHOD_NOT_ALLOWED,
    PLAIN_OK,
    TEXT_TYPE,
    HttpRequest,
    Reply,
    error_text_reply,
    json_reply,
)
from workbench.server.http.shared_memory import cuda_register_arguments, register_arguments
from workbench.server.log_settings import LogSettings
from workbench.server.shared_memory import CUDA, SharedMemoryRegistry
from workbench.server.trace_setting import check_model, http_answer, http_new_setting

#: The extensions this server implements, in Triton's order (``GET /v2``): Triton 2.51's
#: list without "cuda_shared_memory", which ``server_extensions`` adds where a GPU is found.
DEFAULT_EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


def server_extensions(cuda: bool) -> tuple[str, ...]:
    """``DEFAULT_EXTENSIONS``, with "cuda_shared_memory" in Triton's place when ``cuda``."""
    if not cuda:
        return DEFAULT_EXTENSIONS
    at = DEFAULT_EXTENSIONS.index("system_shared_memory") + 1
    return (*DEFAULT_EXTENSIONS[:at], "cuda_shared_memory", *DEFAULT_EXTENSIONS[at:])


class Endpoints:
    """The non-inference handlers over one ``InferenceCore``."""

    def __init__(
        self,
        core: ServingCore,
        extensions: tuple[str, ...],
        log_settings: LogSettings,
        shared_memory: SharedMemoryRegistry,
        tracer: TraceManager,
    ) -> None:
        self.core = core
        self.extensions = extensions
        self.log_settings = log_settings
        self.regions = shared_memory
        self.tracer = tracer

    # -- server -----------------------------------------------------------------------------
    async def server_metadata(self, req: HttpRequest) -> Reply:
        if req.method != "GET":
            return METHOD_NOT_ALLOWED
        return json_reply(
            {
                "name": self.core.server_name,
                "version": self.core.server_version,
                "extensions": list(self.extensions),
            }
        )

    async def health(self, req: HttpRequest, kind: str) -> Reply:
        if req.method != "GET":
            return METHOD_NOT_ALLOWED
        ok = self.core.live if kind == "live" else self.core.ready
        return PLAIN_OK if ok else Reply(400, b"", [TEXT_TYPE])

    # -- models -----------------------------------------------------------------------------
    async def model_ready(self, req: HttpRequest, model: str, version: str) -> Reply:
        if req.method != "GET":
            return METHOD_NOT_ALLOWED
        if not self.core.model_ready(model, version):
            return error_text_reply(400, "Model version not ready")
        return PLAIN_OK

    async def model_metadata(self, req: HttpRequest, model: str, version: str) -> Reply:
        if req.method != "GET":
            return METHOD_NOT_ALLOWED
        return json_reply(self.core.model_metadata(model, version))

    async def model_config(self, req: HttpRequest, model: str, version: str) -> Reply:
        if req.method != "GET":
            return METHOD_NOT_ALLOWED
        return json_reply(config_to_json(self.core.model_config(model, version)))

    async def model_stats(self, req: HttpRequest, model: str = "", version: str = "") -> Reply:
        if req.method != "GET":
            return METHOD_NOT_ALLOWED
        return json_reply(self.core.statistics(model, version))

    # -- repository -------------------------------------------------------------------------
    async def repository_index(self, req: HttpRequest, repository: str) -> Reply:
        if req.method != "POST":
            return METHOD_NOT_ALLOWED
        ready = req.json_object().get("ready", False)
        if not isinstance(ready, bool):
            raise InternalError("attempt to access JSON non-boolean as boolean")
        return json_reply(self.core.repository_index(ready_only=ready))

    async def repository_control(
        self, req: HttpRequest, repository: str, model: str, action: str
    ) -> Reply:
        if req.method != "POST":
            return METHOD_NOT_ALLOWED
        if repository:
            raise UnsupportedError("'repository_name' specification is not supported")
        if action == "load":
            config, files = _load_parameters(_parameters(req))
            await self.core.load(model, config_json=config, files=files or None)
        else:
            await self.core.unload(model, unload_dependents=_unload_dependents(req))
        return EMPTY_OK

    # -- logging, trace, shared memory ---------------------------------------------------------
    async def logging(self, req: HttpRequest) -> Reply:
        if req.method not in ("GET", "POST"):
            return METHOD_NOT_ALLOWED
        if req.method == "POST":
            changes = req.json()
            if not isinstance(changes, dict):
                raise InternalError("attempt to access JSON non-object as object")
            self.log_settings.update(changes)
        return json_reply(self.log_settings.to_json())

    async def trace(self, req: HttpRequest, model: str = "") -> Reply:
        """``/v2[/models/{m}]/trace/setting`` (``HandleTrace``: every answer is JSON)."""
        if req.method not in ("GET", "POST"):
            return json_reply({"error": "Method Not Allowed"}, 405)
        check_model(model, self.core.model_ready)
        if req.method == "POST":
            self.tracer.update(model, http_new_setting(req.json()))
        return json_reply(http_answer(self.tracer, model))

    async def shared_memory(self, req: HttpRequest, kind: str, region: str, action: str) -> Reply:
        """``/v2/{system,cuda}sharedmemory[/region/{name}]/{status,register,unregister}``
        (``HandleSystemSharedMemory`` and ``HandleCudaSharedMemory``: every answer is JSON)."""
        expected = "GET" if action == "status" else "POST"
        if req.method != expected:
            return json_reply({"error": "Method Not Allowed"}, 405)
        if action == "status":
            return json_reply(self.regions.status(region, kind))
        if action == "unregister":
            self.regions.unregister(region, kind)
            return EMPTY_OK
        if not region:
            raise InvalidArgumentError(
                f"'region name' is necessary to register {kind} shared memory region"
            )
        if kind == CUDA:
            self.regions.require_cuda(region)  # refused before the body is read, without GPUs
            self.regions.register_cuda(region, *cuda_register_arguments(req.body))
            return EMPTY_OK
        self.regions.register_system(region, *register_arguments(req.body))
        return EMPTY_OK


def _parameters(req: HttpRequest) -> dict[str, Any]:
    params = req.json_object().get("parameters", {})
    if not isinstance(params, dict):
        raise InternalError("attempt to get members for non-object")
    return params


def _load_parameters(params: dict[str, Any]) -> tuple[str | None, dict[str, bytes]]:
    """``config`` (a JSON string) and ``file:<path>`` (base64) parameters of a load."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if not isinstance(value, str):
            raise InternalError("attempt to access JSON non-string as string")
        if key == "config":
            config = value
        elif key.startswith("file:"):
            files[key] = _base64(key, value)
        else:
            raise InternalError("unexpected error on creating Triton parameter")
    return config, files


def _base64(key: str, value: str) -> bytes:
    try:
        return base64.b64decode(value)
    except (binascii.Error, ValueError) as exc:
        raise InvalidArgumentError(f"parameter '{key}' is not valid base64: {exc}") from None


def _unload_dependents(req: HttpRequest) -> bool:
    """``parameters.unload_dependents`` of an unload. Triton 2.51 answers only the unload's
    own outcome (``HandleRepositoryControl`` overwrites the parse error with it): a body that
    is not JSON, or a value that is not a bool, unloads the model alone."""
    try:
        params = req.json_object().get("parameters")
    except WorkbenchError:
        return False
    value = params.get("unload_dependents") if isinstance(params, dict) else None
    return value if isinstance(value, bool) else False


__all__ = ["DEFAULT_EXTENSIONS", "Endpoints", "server_extensions"]
