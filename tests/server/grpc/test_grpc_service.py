"""The gRPC front end's unary RPCs, driven with ``tritonclient.grpc`` over loopback.

The front end serves the fake core (``fake_core.py``) on a uvloop event loop in a background
thread, as the hosting code runs it; ``grpc_server`` is shared with ``test_grpc_stream.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from tests.server.fake_core import FakeCore
from tests.server.grpc.served import BUILT_SERVERS, GrpcServer, serve_grpc
from workbench.errors import InvalidArgumentError, UnavailableError
from workbench.server.grpc import GrpcFrontend, GrpcOptions
from workbench.server.http.endpoints import DEFAULT_EXTENSIONS
from workbench.server.log_settings import LogSettings


@pytest.fixture(scope="module", params=BUILT_SERVERS)
def grpc_server(request: pytest.FixtureRequest) -> Iterator[GrpcServer]:
    yield from serve_grpc(implementation=request.param)


def _code(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    error: Any = info.value
    return error.code(), error.details()


def _add_one_input(batch: int = 1) -> tuple[grpcclient.InferInput, np.ndarray]:
    data = np.arange(16 * batch, dtype=np.float32).reshape(batch, 16)
    tensor = grpcclient.InferInput("INPUT0", [batch, 16], "FP32")
    tensor.set_data_from_numpy(data)
    return tensor, data


# -- health and metadata --------------------------------------------------------------------------
def test_health_and_server_metadata(grpc_server: GrpcServer) -> None:
    client = grpc_server.client()
    assert client.is_server_live() and client.is_server_ready()
    metadata = client.get_server_metadata(as_json=True)
    assert metadata == {
        "name": "triton",
        "version": "2.51.0",
        "extensions": list(DEFAULT_EXTENSIONS),
    }
    grpc_server.core.ready = False
    try:
        assert not client.is_server_ready()
    finally:
        grpc_server.core.ready = True


def test_model_ready_is_false_for_unknown_models_without_an_error(grpc_server: GrpcServer) -> None:
    client = grpc_server.client()
    assert client.is_model_ready("add_one")
    assert client.is_model_ready("add_one", "1")
    assert not client.is_model_ready("nope")
    assert not client.is_model_ready("add_one", "7")


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (
            "x",
            "failed to get model version from specified version string 'x' (details: stol), "
            "version should be an integral value > 0",
        ),
        ("-2", "invalid model version specified '-2' , version should be an integral value > 0"),
    ],
)
def test_bad_version_strings_are_invalid_arguments(
    grpc_server: GrpcServer, version: str, message: str
) -> None:
    stub = grpc_server.stub()
    for call in (
        lambda: stub.ModelReady(pb.ModelReadyRequest(name="add_one", version=version)),
        lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="add_one", version=version)),
        lambda: stub.ModelConfig(pb.ModelConfigRequest(name="add_one", version=version)),
    ):
        assert _code(call) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_model_metadata_and_config(grpc_server: GrpcServer) -> None:
    client = grpc_server.client()
    metadata = client.get_model_metadata("add_one", as_json=True)
    assert metadata["name"] == "add_one" and metadata["versions"] == ["1"]
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}]
    config = client.get_model_config("add_one").config
    assert (config.name, config.max_batch_size, config.input[0].dims) == ("add_one", 8, [16])
    # "01" as std::stol reads it: the version 1
    assert client.get_model_metadata("add_one", "01").name == "add_one"


def test_unknown_models_are_not_found(grpc_server: GrpcServer) -> None:
    stub = grpc_server.stub()
    code, message = _code(lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="nope")))
    assert code == grpc.StatusCode.NOT_FOUND and "'nope'" in message
    code, _ = _code(lambda: stub.ModelConfig(pb.ModelConfigRequest(name="nope")))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = _code(
        lambda: stub.ModelMetadata(pb.ModelMetadataRequest(name="add_one", version="3"))
    )
    assert code == grpc.StatusCode.UNAVAILABLE  # the fake core's answer for a missing version


def test_statistics(grpc_server: GrpcServer) -> None:
    client = grpc_server.client()
    tensor, _ = _add_one_input()
    before = grpc_server.core.success.get("add_one", 0)
    client.infer("add_one", [tensor])
    stats = client.get_inference_statistics("add_one", as_json=True)["model_stats"]
    assert [(s["name"], s["version"]) for s in stats] == [("add_one", "1")]
    assert int(stats[0]["inference_count"]) == before + 1
    assert int(stats[0]["inference_stats"]["success"]["count"]) == before + 1
    everything = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in everything} == set(grpc_server.core.configs)
    with pytest.raises(InferenceServerException) as info:
        client.get_inference_statistics("nope")
    assert info.value.status() == "StatusCode.NOT_FOUND"


# -- repository -----------------------------------------------------------------------------------
def test_repository_index(grpc_server: GrpcServer) -> None:
    index = grpc_server.client().get_model_repository_index(as_json=True)["models"]
    assert {"name": "add_one", "version": "1", "state": "READY"} in index
    stub = grpc_server.stub()
    request = pb.RepositoryIndexRequest(repository_name="other")
    assert _code(lambda: stub.RepositoryIndex(request)) == (
        grpc.StatusCode.UNIMPLEMENTED,
        "'repository_name' specification is not supported",
    )


def test_load_with_config_and_files_then_unload() -> None:
    for server in serve_grpc():
        client = server.client()
        config = '{"input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}]}'
        client.load_model("fresh", config=config, files={"file:1/model.py": b"print(1)"})
        assert server.core.loads[-1] == ("fresh", config, {"file:1/model.py": b"print(1)"})
        assert client.is_model_ready("fresh")
        client.load_model("add_one")
        assert server.core.loads[-1] == ("add_one", None, None)
        client.unload_model("fresh")
        assert not client.is_model_ready("fresh")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"bogus": pb.ModelRepositoryParameter(string_param="1")},
            "unrecognized load parameter 'bogus'.",
        ),
        (
            {"config": pb.ModelRepositoryParameter(int64_param=1)},
            "invalid value type for load parameter 'config', expected string_param.",
        ),
        (
            {"file:1/model.py": pb.ModelRepositoryParameter(string_param="x")},
            "invalid value type for load parameter 'file:1/model.py', expected bytes_param.",
        ),
    ],
)
def test_load_parameters_are_checked(
    grpc_server: GrpcServer, parameters: dict[str, Any], message: str
) -> None:
    request = pb.RepositoryModelLoadRequest(model_name="add_one", parameters=parameters)
    stub = grpc_server.stub()
    code, details = _code(lambda: stub.RepositoryModelLoad(request))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_load_and_unload_errors(grpc_server: GrpcServer) -> None:
    stub = grpc_server.stub()
    code, details = _code(
        lambda: stub.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="nope"))
    )
    assert code == grpc.StatusCode.NOT_FOUND and "failed to load 'nope'" in details
    bad = pb.RepositoryModelUnloadRequest(
        model_name="add_one",
        parameters={"unload_dependents": pb.ModelRepositoryParameter(string_param="1")},
    )
    assert _code(lambda: stub.RepositoryModelUnload(bad)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "invalid value type for 'unload_dependents' parameter, expected bool_param.",
    )
    named = pb.RepositoryModelUnloadRequest(model_name="add_one", repository_name="r")
    assert _code(lambda: stub.RepositoryModelUnload(named))[0] == grpc.StatusCode.UNIMPLEMENTED
    assert grpc_server.client().is_model_ready("add_one")


# -- logging, trace, shared memory --------------------------------------------------------------
def test_log_settings_read_and_update(grpc_server: GrpcServer) -> None:
    client = grpc_server.client()
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"] == {"bool_param": True}
    assert settings["log_format"] == {"string_param": "default"}
    updated = client.update_log_settings(
        {"log_verbose_level": 2, "log_format": "ISO8601", "log_warning": False}, as_json=True
    )["settings"]
    assert updated["log_verbose_level"] == {"uint32_param": 2}
    assert updated["log_format"] == {"string_param": "ISO8601"}
    assert updated["log_warning"] == {"bool_param": False}
    assert grpc_server.log_settings.log_verbose_level == 2
    client.update_log_settings(
        {"log_verbose_level": 0, "log_format": "default", "log_warning": True}
    )


@pytest.mark.parametrize(
    ("name", "value", "code", "message"),
    [
        ("log_info", {"string_param": "x"}, "INVALID_ARGUMENT", "expect boolean for 'log_info'"),
        (
            "log_verbose_level",
            {"bool_param": True},
            "INVALID_ARGUMENT",
            "expect int32 for 'log_verbose_level'",
        ),
        (
            "log_format",
            {"string_param": "x"},
            "INVALID_ARGUMENT",
            "invalid argument for log_format, got: x",
        ),
        (
            "log_file",
            {"string_param": "x"},
            "UNIMPLEMENTED",
            "log file location can not be updated through network protocol",
        ),
    ],
)
def test_log_settings_errors(
    grpc_server: GrpcServer, name: str, value: dict[str, Any], code: str, message: str
) -> None:
    request = pb.LogSettingsRequest(settings={name: pb.LogSettingsRequest.SettingValue(**value)})
    stub = grpc_server.stub()
    assert _code(lambda: stub.LogSettings(request)) == (grpc.StatusCode[code], message)


def test_trace_settings_answer_as_over_http(grpc_server: GrpcServer) -> None:
    stub = grpc_server.stub()
    answer = stub.TraceSetting(pb.TraceSettingRequest())
    assert {k: list(v.value) for k, v in answer.settings.items()} == {
        "trace_level": ["OFF"],
        "trace_rate": ["1000"],
        "trace_count": ["-1"],
        "log_frequency": ["0"],
        "trace_file": [""],
        "trace_mode": ["triton"],
    }
    value = pb.TraceSettingRequest.SettingValue
    no_file = pb.TraceSettingRequest(settings={"trace_level": value(value=["TIMESTAMPS"])})
    assert _code(lambda: stub.TraceSetting(no_file)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Attempting to set invalid trace setting :trace file name is not given",
    )
    unknown = pb.TraceSettingRequest(model_name="nope")
    assert _code(lambda: stub.TraceSetting(unknown)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Request for unknown model : nope",
    )


def test_shared_memory_answers_as_over_http(grpc_server: GrpcServer) -> None:
    stub = grpc_server.stub()
    client = grpc_server.client()
    assert client.get_system_shared_memory_status(as_json=True) == {}
    assert client.get_cuda_shared_memory_status(as_json=True) == {}
    client.unregister_system_shared_memory("r")
    client.unregister_cuda_shared_memory()
    register = pb.SystemSharedMemoryRegisterRequest(name="r", key="/wb_no_such_key", byte_size=16)
    assert _code(lambda: stub.SystemSharedMemoryRegister(register)) == (
        grpc.StatusCode.INTERNAL,
        "Unable to open shared memory region: '/wb_no_such_key'",
    )
    cuda = pb.CudaSharedMemoryRegisterRequest(name="r", byte_size=16)
    assert _code(lambda: stub.CudaSharedMemoryRegister(cuda)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "failed to register CUDA shared memory region: 'r', GPUs not supported",
    )


# -- the frontend itself ------------------------------------------------------------------
def test_options_are_checked() -> None:
    core = FakeCore()
    settings = LogSettings()
    with pytest.raises(InvalidArgumentError, match="compression-level"):
        GrpcFrontend(
            core, GrpcOptions(infer_compression="max"), log_settings=settings, extensions=()
        )  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_message_bytes"):
        GrpcFrontend(core, GrpcOptions(max_message_bytes=0), log_settings=settings, extensions=())  # type: ignore[arg-type]


def test_a_port_in_use_is_an_unavailable_error(grpc_server: GrpcServer) -> None:
    port = int(grpc_server.url.rsplit(":", 1)[1])
    other = GrpcFrontend(
        FakeCore(),  # type: ignore[arg-type]
        GrpcOptions(port=port, address="127.0.0.1"),
        log_settings=LogSettings(),
        extensions=(),
    )
    future = asyncio.run_coroutine_threadsafe(other.start(), grpc_server.loop)
    with pytest.raises(UnavailableError, match=f"cannot listen on 127.0.0.1:{port}"):
        future.result(30)
    assert grpc_server.client().is_server_live()  # the first server is untouched
