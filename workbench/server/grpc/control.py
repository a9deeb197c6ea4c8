"""The gRPC repository, logging, trace and shared-memory RPCs over the core.

Each mirrors its ``CommonHandler::Register*`` counterpart in Triton 2.51's
``src/grpc/grpc_server.cc``: typed parameters are checked with Triton's texts, shared memory
(system and CUDA) goes to the registry HTTP shares, and trace settings are the ones HTTP reads
and updates.
"""

from __future__ import annotations

from collections.abc import Mapping

from google.protobuf.message import Message
from tritonclient.grpc import service_pb2 as pb

from workbench.core.contract import ServingCore
from workbench.core.trace_settings import TraceManager
from workbench.errors import InvalidArgumentError, UnsupportedError
from workbench.server.log_settings import LogSettings
from workbench.server.shared_memory import CUDA, SharedMemoryRegistry
from workbench.server.trace_setting import check_model, grpc_new_setting, setting_values

LogValue = pb.LogSettingsRequest.SettingValue
_NO_REPOSITORY_NAME = "'repository_name' specification is not supported"
#: setting -> (the ``SettingValue`` field it needs, Triton's word for that type), in the order
#: Triton applies them (each one is applied before the next is checked)
_LOG_SETTINGS = {
    "log_info": ("bool_param", "boolean"),
    "log_warning": ("bool_param", "boolean"),
    "log_error": ("bool_param", "boolean"),
    "log_verbose_level": ("uint32_param", "int32"),
    "log_format": ("string_param", "string"),
}
_LOG_FORMATS = ("default", "ISO8601")


# -- repository ---------------------------------------------------------------------------------
def repository_index(core: ServingCore, request: pb.RepositoryIndexRequest) -> Message:
    if request.repository_name:
        raise UnsupportedError(_NO_REPOSITORY_NAME)
    entries = core.repository_index(ready_only=request.ready)
    models = [pb.RepositoryIndexResponse.ModelIndex(**entry) for entry in entries]
    return pb.RepositoryIndexResponse(models=models)


async def load(core: ServingCore, request: pb.RepositoryModelLoadRequest) -> Message:
    if request.repository_name:
        raise UnsupportedError(_NO_REPOSITORY_NAME)
    config, files = load_parameters(request.parameters)
    await core.load(request.model_name, config_json=config, files=files or None)
    return pb.RepositoryModelLoadResponse()


def load_parameters(
    params: Mapping[str, pb.ModelRepositoryParameter],
) -> tuple[str | None, dict[str, bytes]]:
    """``config`` (a JSON string) and ``file:<path>`` (bytes) parameters of a load."""
    config: str | None = None
    files: dict[str, bytes] = {}
    for key, param in params.items():
        kind = param.WhichOneof("parameter_choice")
        if key == "config":
            _expect_load_type(key, kind, "string_param")
            config = param.string_param
        elif key.startswith("file:"):
            _expect_load_type(key, kind, "bytes_param")
            files[key] = param.bytes_param
        else:
            raise InvalidArgumentError(f"unrecognized load parameter '{key}'.")
    return config, files


def _expect_load_type(key: str, kind: str | None, expected: str) -> None:
    if kind != expected:
        raise InvalidArgumentError(
            f"invalid value type for load parameter '{key}', expected {expected}."
        )


async def unload(core: ServingCore, request: pb.RepositoryModelUnloadRequest) -> Message:
    if request.repository_name:
        raise UnsupportedError(_NO_REPOSITORY_NAME)
    dependents = False
    if "unload_dependents" in request.parameters:
        param = request.parameters["unload_dependents"]
        if param.WhichOneof("parameter_choice") != "bool_param":
            raise InvalidArgumentError(
                "invalid value type for 'unload_dependents' parameter, expected bool_param."
            )
        dependents = param.bool_param
    await core.unload(request.model_name, unload_dependents=dependents)
    return pb.RepositoryModelUnloadResponse()


# -- logging and trace ---------------------------------------------------------------------------
def log_settings(settings: LogSettings, request: pb.LogSettingsRequest) -> Message:
    """Apply the settings a request carries (in Triton's order), then answer all of them."""
    if "log_file" in request.settings:
        raise UnsupportedError("log file location can not be updated through network protocol")
    for name, (field, word) in _LOG_SETTINGS.items():
        if name not in request.settings:
            continue
        value = request.settings[name]
        if value.WhichOneof("parameter_choice") != field:
            raise InvalidArgumentError(f"expect {word} for '{name}'")
        new = getattr(value, field)
        if name == "log_format" and new not in _LOG_FORMATS:
            raise InvalidArgumentError(f"invalid argument for log_format, got: {new}")
        settings.update({name: new})
    return pb.LogSettingsResponse(settings=_log_values(settings))


def _log_values(settings: LogSettings) -> dict[str, pb.LogSettingsResponse.SettingValue]:
    value = pb.LogSettingsResponse.SettingValue
    return {
        "log_file": value(string_param=settings.log_file),
        "log_info": value(bool_param=settings.log_info),
        "log_warning": value(bool_param=settings.log_warning),
        "log_error": value(bool_param=settings.log_error),
        "log_verbose_level": value(uint32_param=settings.log_verbose_level),
        "log_format": value(string_param=settings.log_format),
    }


def trace_setting(
    core: ServingCore, tracer: TraceManager, request: pb.TraceSettingRequest
) -> Message:
    """Update (when the request carries settings), then answer the setting; the texts and
    rules are the HTTP side's (``server/trace_setting.py``)."""
    check_model(request.model_name, core.model_ready)
    new = grpc_new_setting({name: list(v.value) for name, v in request.settings.items()})
    if new is not None:
        tracer.update(request.model_name, new)
    value = pb.TraceSettingResponse.SettingValue
    values = setting_values(tracer, request.model_name)
    return pb.TraceSettingResponse(settings={k: value(value=v) for k, v in values.items()})


# -- shared memory: the registry HTTP shares ------------------------------------------------------
def system_shm_status(
    regions: SharedMemoryRegistry, request: pb.SystemSharedMemoryStatusRequest
) -> Message:
    status = pb.SystemSharedMemoryStatusResponse.RegionStatus
    response = pb.SystemSharedMemoryStatusResponse()
    for entry in regions.status(request.name):
        response.regions[entry["name"]].CopyFrom(status(**entry))
    return response


def system_shm_register(
    regions: SharedMemoryRegistry, request: pb.SystemSharedMemoryRegisterRequest
) -> Message:
    # Triton passes the name on as it is: an empty one is registered under "" (and is then
    # what an unregister without a name would also remove)
    regions.register_system(request.name, request.key, request.offset, request.byte_size)
    return pb.SystemSharedMemoryRegisterResponse()


def system_shm_unregister(
    regions: SharedMemoryRegistry, request: pb.SystemSharedMemoryUnregisterRequest
) -> Message:
    regions.unregister(request.name)
    return pb.SystemSharedMemoryUnregisterResponse()


def cuda_shm_status(
    regions: SharedMemoryRegistry, request: pb.CudaSharedMemoryStatusRequest
) -> Message:
    status = pb.CudaSharedMemoryStatusResponse.RegionStatus
    response = pb.CudaSharedMemoryStatusResponse()
    for entry in regions.status(request.name, CUDA):
        response.regions[entry["name"]].CopyFrom(status(**entry))
    return response


def cuda_shm_unregister(
    regions: SharedMemoryRegistry, request: pb.CudaSharedMemoryUnregisterRequest
) -> Message:
    regions.unregister(request.name, CUDA)
    return pb.CudaSharedMemoryUnregisterResponse()


def cuda_shm_register(
    regions: SharedMemoryRegistry, request: pb.CudaSharedMemoryRegisterRequest
) -> Message:
    # Triton reads the handle's 64 bytes whatever the field holds: one of another length
    # names no allocation, and opening it fails ("invalid argument")
    regions.register_cuda(request.name, request.raw_handle, request.device_id, request.byte_size)
    return pb.CudaSharedMemoryRegisterResponse()


__all__ = [
    "cuda_shm_register",
    "cuda_shm_status",
    "cuda_shm_unregister",
    "load",
    "load_parameters",
    "log_settings",
    "repository_index",
    "system_shm_register",
    "system_shm_status",
    "system_shm_unregister",
    "trace_setting",
    "unload",
]
