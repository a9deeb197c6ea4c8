"""Side by side over gRPC: the same requests to real Triton 2.51 and to the embedded server.

Unary RPCs go to the shared ``real_triton`` / ``embedded_server`` fixtures (the conformance
repository). Streams need a decoupled model, so a second pair serves the conformance
repository plus ``decoupled_repeat`` (from ``tests/assets/scheduling_repo``). The gRPC status
code and message must be identical, and so must every response message (after removing what
varies by run: durations and timestamps). ``perf_analyzer -i grpc`` must complete a run
against the embedded server and report its server-side statistics.

The embedded side is reached through ``Server.grpc_url``; a server started without gRPC gets
a frontend attached to its loop instead (``grpc_url_of``).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.integration.conftest import CONFORMANCE_REPO
from tests.integration.peers import (
    REPO_ROOT,
    Peers,
    TritonServerProcess,
    copy_repository,
    run_perf_analyzer,
)
from workbench.server.grpc import GrpcFrontend, GrpcOptions
from workbench.server.hosting import Server
from workbench.server.http.endpoints import DEFAULT_EXTENSIONS
from workbench.server.log_settings import LogSettings

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

P = pb.InferParameter
Input = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor
ROW = np.arange(16, dtype=np.float32).reshape(1, 16)
DECOUPLED = REPO_ROOT / "tests" / "assets" / "scheduling_repo" / "decoupled_repeat"
_ATTACHED: dict[int, tuple[str, GrpcFrontend, asyncio.AbstractEventLoop]] = {}


def grpc_url_of(server: Server | TritonServerProcess) -> str:
    """The server's gRPC ``host:port``; for the embedded server without one, a frontend is
    attached to its loop (once per server)."""
    if getattr(server, "grpc_port", 0):
        return str(server.grpc_url)
    assert isinstance(server, Server) and server.loop is not None and server.core is not None
    if id(server) not in _ATTACHED:
        frontend = GrpcFrontend(
            server.core,
            GrpcOptions(port=0, address="127.0.0.1"),
            log_settings=LogSettings(),
            extensions=DEFAULT_EXTENSIONS,
        )
        port = asyncio.run_coroutine_threadsafe(frontend.start(), server.loop).result(30)
        _ATTACHED[id(server)] = (f"127.0.0.1:{port}", frontend, server.loop)
    return _ATTACHED[id(server)][0]


def _detach(key: int) -> None:
    entry = _ATTACHED.pop(key, None)
    if entry is not None:
        _, frontend, loop = entry
        asyncio.run_coroutine_threadsafe(frontend.stop(1.0), loop).result(30)


@pytest.fixture(scope="module", autouse=True)
def _attached_frontends() -> Iterator[None]:
    """Stop the frontends ``grpc_url_of`` attached before their servers stop."""
    yield
    for key in list(_ATTACHED):
        _detach(key)


def _stub(url: str) -> service_pb2_grpc.GRPCInferenceServiceStub:
    return service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (0 if k in ("ns", "last_inference") else _strip(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _call(url: str, rpc: str, request: Any) -> dict[str, Any]:
    """Status code, message and the response as a dict."""
    try:
        response = getattr(_stub(url), rpc)(request, timeout=30)
    except grpc.RpcError as error:
        failure: Any = error
        return {"code": failure.code().name, "details": failure.details()}
    body = json_format.MessageToDict(response, preserving_proto_field_name=True)
    return {"code": "OK", "body": _strip(body)}


def _add_one(**fields: Any) -> pb.ModelInferRequest:
    base: dict[str, Any] = {
        "model_name": "add_one",
        "id": "c1",
        "inputs": [Input(name="INPUT0", datatype="FP32", shape=[1, 16])],
        "raw_input_contents": [ROW.tobytes()],
    }
    base.update(fields)
    return pb.ModelInferRequest(**base)


def _typed(datatype: str, field: str, values: list[Any]) -> pb.ModelInferRequest:
    contents = pb.InferTensorContents(**{field: values})
    tensor = Input(
        name=f"IN_{datatype}", datatype=datatype, shape=[1, len(values)], contents=contents
    )
    return pb.ModelInferRequest(model_name="identity_all", inputs=[tensor])


#: name -> (rpc, request); each is sent to both servers and the answers compared
UNARY_CASES: dict[str, tuple[str, Any]] = {
    "server_live": ("ServerLive", pb.ServerLiveRequest()),
    "server_ready": ("ServerReady", pb.ServerReadyRequest()),
    "model_ready": ("ModelReady", pb.ModelReadyRequest(name="add_one")),
    "model_ready_unknown": ("ModelReady", pb.ModelReadyRequest(name="nope")),
    "model_ready_unknown_version": (
        "ModelReady",
        pb.ModelReadyRequest(name="add_one", version="7"),
    ),
    "model_ready_bad_version": ("ModelReady", pb.ModelReadyRequest(name="add_one", version="x")),
    "model_ready_negative_version": (
        "ModelReady",
        pb.ModelReadyRequest(name="add_one", version="-2"),
    ),
    "metadata_add_one": ("ModelMetadata", pb.ModelMetadataRequest(name="add_one")),
    "metadata_identity_all": ("ModelMetadata", pb.ModelMetadataRequest(name="identity_all")),
    "metadata_unknown": ("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
    "metadata_unknown_version": (
        "ModelMetadata",
        pb.ModelMetadataRequest(name="add_one", version="7"),
    ),
    "config_add_one": ("ModelConfig", pb.ModelConfigRequest(name="add_one")),
    "config_echo_bytes": ("ModelConfig", pb.ModelConfigRequest(name="echo_bytes")),
    "config_unknown": ("ModelConfig", pb.ModelConfigRequest(name="nope")),
    "stats_unknown": ("ModelStatistics", pb.ModelStatisticsRequest(name="nope")),
    "index": ("RepositoryIndex", pb.RepositoryIndexRequest()),
    "index_ready": ("RepositoryIndex", pb.RepositoryIndexRequest(ready=True)),
    "index_named_repository": ("RepositoryIndex", pb.RepositoryIndexRequest(repository_name="x")),
    "load_unknown": ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="nope")),
    "load_bad_parameter": (
        "RepositoryModelLoad",
        pb.RepositoryModelLoadRequest(
            model_name="add_one",
            parameters={"bogus": pb.ModelRepositoryParameter(string_param="1")},
        ),
    ),
    "load_config_not_a_string": (
        "RepositoryModelLoad",
        pb.RepositoryModelLoadRequest(
            model_name="add_one", parameters={"config": pb.ModelRepositoryParameter(int64_param=1)}
        ),
    ),
    "unload_unknown": ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="nope")),
    "unload_bad_parameter": (
        "RepositoryModelUnload",
        pb.RepositoryModelUnloadRequest(
            model_name="nope",
            parameters={"unload_dependents": pb.ModelRepositoryParameter(string_param="1")},
        ),
    ),
    "log_settings": ("LogSettings", pb.LogSettingsRequest()),
    "log_bad_type": (
        "LogSettings",
        pb.LogSettingsRequest(
            settings={"log_info": pb.LogSettingsRequest.SettingValue(string_param="x")}
        ),
    ),
    "log_bad_format": (
        "LogSettings",
        pb.LogSettingsRequest(
            settings={"log_format": pb.LogSettingsRequest.SettingValue(string_param="x")}
        ),
    ),
    "log_file": (
        "LogSettings",
        pb.LogSettingsRequest(
            settings={"log_file": pb.LogSettingsRequest.SettingValue(string_param="x")}
        ),
    ),
    "shm_status": ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest()),
    "shm_unregister": (
        "SystemSharedMemoryUnregister",
        pb.SystemSharedMemoryUnregisterRequest(name="r"),
    ),
    "infer_raw": ("ModelInfer", _add_one()),
    "infer_batch_2": (
        "ModelInfer",
        _add_one(
            inputs=[Input(name="INPUT0", datatype="FP32", shape=[2, 16])],
            raw_input_contents=[np.concatenate([ROW, ROW]).tobytes()],
        ),
    ),
    "infer_typed": (
        "ModelInfer",
        _add_one(
            inputs=[
                Input(
                    name="INPUT0",
                    datatype="FP32",
                    shape=[1, 16],
                    contents=pb.InferTensorContents(fp32_contents=ROW.ravel().tolist()),
                )
            ],
            raw_input_contents=[],
        ),
    ),
    "infer_bytes_typed": (
        "ModelInfer",
        pb.ModelInferRequest(
            model_name="echo_bytes",
            inputs=[
                Input(
                    name="INPUT0",
                    datatype="BYTES",
                    shape=[1, 2],
                    contents=pb.InferTensorContents(bytes_contents=[b"ab", b"cde"]),
                )
            ],
        ),
    ),
    "infer_int8_typed": ("ModelInfer", _typed("INT8", "int_contents", [1, -2, 300])),
    "infer_uint16_typed": ("ModelInfer", _typed("UINT16", "uint_contents", [1, 70000])),
    "infer_bool_typed": ("ModelInfer", _typed("BOOL", "bool_contents", [True, False])),
    "infer_fp16_typed_as_fp32": ("ModelInfer", _typed("FP16", "fp32_contents", [1.0, 2.0])),
    "infer_two_typed_fields": (
        "ModelInfer",
        pb.ModelInferRequest(
            model_name="identity_all",
            inputs=[
                Input(
                    name="IN_INT32",
                    datatype="INT32",
                    shape=[1, 2],
                    contents=pb.InferTensorContents(int_contents=[1, 2], int64_contents=[1, 2]),
                )
            ],
        ),
    ),
    "infer_typed_and_raw": (
        "ModelInfer",
        _add_one(
            inputs=[
                Input(
                    name="INPUT0",
                    datatype="FP32",
                    shape=[1, 16],
                    contents=pb.InferTensorContents(fp32_contents=[0.0] * 16),
                )
            ]
        ),
    ),
    "infer_no_data": ("ModelInfer", _add_one(raw_input_contents=[])),
    "infer_short_raw": ("ModelInfer", _add_one(raw_input_contents=[ROW.tobytes()[:-4]])),
    "infer_extra_raw": ("ModelInfer", _add_one(raw_input_contents=[ROW.tobytes(), b"zz"])),
    "infer_unknown_model": ("ModelInfer", _add_one(model_name="nope")),
    "infer_bad_version": ("ModelInfer", _add_one(model_version="q")),
    "infer_unknown_version": ("ModelInfer", _add_one(model_version="9")),
    "infer_wrong_dtype": (
        "ModelInfer",
        _add_one(
            inputs=[Input(name="INPUT0", datatype="FP64", shape=[1, 16])],
            raw_input_contents=[np.zeros(16).tobytes()],
        ),
    ),
    "infer_invalid_dtype": (
        "ModelInfer",
        _add_one(inputs=[Input(name="INPUT0", datatype="FOO", shape=[1, 16])]),
    ),
    "infer_unknown_input": (
        "ModelInfer",
        _add_one(inputs=[Input(name="X", datatype="FP32", shape=[1, 16])]),
    ),
    "infer_duplicate_input": (
        "ModelInfer",
        _add_one(
            inputs=[Input(name="INPUT0", datatype="FP32", shape=[1, 16])] * 2,
            raw_input_contents=[ROW.tobytes()] * 2,
        ),
    ),
    "infer_unknown_output": ("ModelInfer", _add_one(outputs=[Output(name="NOPE")])),
    "infer_batch_too_large": (
        "ModelInfer",
        _add_one(
            inputs=[Input(name="INPUT0", datatype="FP32", shape=[9, 16])],
            raw_input_contents=[np.zeros((9, 16), np.float32).tobytes()],
        ),
    ),
    "infer_classification": (
        "ModelInfer",
        _add_one(outputs=[Output(name="OUTPUT0", parameters={"classification": P(int64_param=3)})]),
    ),
    "infer_classification_bad_type": (
        "ModelInfer",
        _add_one(
            outputs=[Output(name="OUTPUT0", parameters={"classification": P(bool_param=True)})]
        ),
    ),
    "infer_output_shared_memory": (
        "ModelInfer",
        _add_one(
            outputs=[
                Output(name="OUTPUT0", parameters={"shared_memory_region": P(string_param="r")})
            ]
        ),
    ),
    "infer_model_error": (
        "ModelInfer",
        pb.ModelInferRequest(
            model_name="fails_on_negative",
            inputs=[Input(name="INPUT0", datatype="FP32", shape=[1, 2])],
            raw_input_contents=[np.array([-1, 2], np.float32).tobytes()],
        ),
    ),
    "infer_bytes_raw_short": (
        "ModelInfer",
        pb.ModelInferRequest(
            model_name="echo_bytes",
            inputs=[Input(name="INPUT0", datatype="BYTES", shape=[1, 2])],
            raw_input_contents=[b"\x02\x00\x00\x00ab"],
        ),
    ),
}
for _key, _value in {
    "sequence_id": P(bool_param=True),
    "sequence_start": P(int64_param=1),
    "priority": P(int64_param=-1),
    "priority_string": P(string_param="x"),
    "timeout": P(uint64_param=5),
    "triton_x": P(bool_param=True),
    "triton_enable_empty_final_response": P(int64_param=1),
    "custom_uint": P(uint64_param=1),
}.items():
    _name = _key.removesuffix("_string").removesuffix("_uint")
    _name = "custom" if _key == "custom_uint" else _name
    UNARY_CASES[f"infer_parameter_{_key}"] = ("ModelInfer", _add_one(parameters={_name: _value}))
for _key, _value in {
    "binary_data_output": P(bool_param=True),
    "sequence_id": P(int64_param=5),
    "priority": P(uint64_param=1),
    "custom": P(double_param=1.5),
}.items():
    UNARY_CASES[f"infer_parameter_ok_{_key}"] = ("ModelInfer", _add_one(parameters={_key: _value}))

#: trace settings (read only: these servers have no trace file; test_conformance_trace.py
#: changes them on servers of its own)
UNARY_CASES["trace_setting"] = ("TraceSetting", pb.TraceSettingRequest())
UNARY_CASES["trace_setting_add_one"] = (
    "TraceSetting",
    pb.TraceSettingRequest(model_name="add_one"),
)
UNARY_CASES["trace_setting_unknown_model"] = (
    "TraceSetting",
    pb.TraceSettingRequest(model_name="nope"),
)

#: deliberate difference, asserted on our side by ``test_deliberate_differences``:
#: CUDA shared memory is answered as a build without GPUs (pytriton's has them).
DIFFERENT = {
    "cuda_register": ("CudaSharedMemoryRegister", pb.CudaSharedMemoryRegisterRequest(name="r")),
}


#: known differences of the core (they show over HTTP as well), to be fixed there
def _unary_params() -> list[Any]:
    return sorted(UNARY_CASES)


@pytest.mark.parametrize("name", _unary_params())
def test_same_answer_as_real_triton(
    name: str, real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    rpc, request = UNARY_CASES[name]
    real = _call(real_triton.grpc_url, rpc, request)
    ours = _call(grpc_url_of(embedded_server), rpc, request)
    assert ours == real, name


def test_server_metadata_lists_a_subset_of_tritons_extensions(
    real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    real = _call(real_triton.grpc_url, "ServerMetadata", pb.ServerMetadataRequest())["body"]
    ours = _call(grpc_url_of(embedded_server), "ServerMetadata", pb.ServerMetadataRequest())["body"]
    assert (ours["name"], ours["version"]) == (real["name"], real["version"])
    assert [e for e in real["extensions"] if e in ours["extensions"]] == ours["extensions"]


def test_statistics_after_an_infer_have_tritons_shape(
    real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    shapes = []
    for url in (real_triton.grpc_url, grpc_url_of(embedded_server)):
        _call(url, "ModelInfer", _add_one())
        stats = _call(url, "ModelStatistics", pb.ModelStatisticsRequest(name="add_one"))
        assert stats["code"] == "OK"
        entry = stats["body"]["model_stats"][0]
        assert int(entry["inference_stats"]["success"]["count"]) >= 1
        shapes.append(sorted(entry["inference_stats"]))
    assert shapes[0] == shapes[1]


def test_deliberate_differences(embedded_server: Server) -> None:
    url = grpc_url_of(embedded_server)
    assert _call(url, *DIFFERENT["cuda_register"]) == {
        "code": "INVALID_ARGUMENT",
        "details": "failed to register CUDA shared memory region: 'r', GPUs not supported",
    }


# -- streams -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stream_servers(
    peers: Peers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(real Triton's gRPC url, ours) on the conformance repository plus ``decoupled_repeat``."""
    workdir = tmp_path_factory.mktemp("grpc_streams")
    repositories = []
    for side in ("real", "ours"):
        repository = copy_repository(CONFORMANCE_REPO, workdir / side)
        shutil.copytree(DECOUPLED, repository / "decoupled_repeat", symlinks=False)
        repositories.append(repository)
    with TritonServerProcess(peers, repositories[0], log_path=workdir / "triton.log") as real:
        server = Server(
            repositories[1],
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            model_control_mode="explicit",
            load_model=["*"],
        )
        with server:
            yield real.grpc_url, grpc_url_of(server)
            _detach(id(server))


def _repeat(count: int, request_id: str, **params: Any) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        model_name="decoupled_repeat",
        id=request_id,
        inputs=[Input(name="COUNT", datatype="INT32", shape=[1])],
        raw_input_contents=[np.int32(count).tobytes()],
        parameters=params,
    )


def _stream(url: str, requests: list[pb.ModelInferRequest], **call: Any) -> dict[str, Any]:
    """Every response (raw outputs decoded as text for comparison), or the ending status."""
    responses: list[dict[str, Any]] = []
    try:
        for response in _stub(url).ModelStreamInfer(iter(requests), timeout=60, **call):
            responses.append(json_format.MessageToDict(response, preserving_proto_field_name=True))
    except grpc.RpcError as error:
        failure: Any = error
        return {"responses": responses, "code": failure.code().name, "details": failure.details()}
    return {"responses": responses, "code": "OK"}


EMPTY_FINAL = {"triton_enable_empty_final_response": P(bool_param=True)}
STREAM_CASES: dict[str, Callable[[], list[pb.ModelInferRequest]]] = {
    "decoupled_three": lambda: [_repeat(3, "a")],
    "decoupled_empty_final": lambda: [_repeat(2, "a", **EMPTY_FINAL)],
    "decoupled_zero_empty_final": lambda: [_repeat(0, "z", **EMPTY_FINAL)],
    "decoupled_error_response": lambda: [_repeat(-1, "n")],
    "decoupled_bad_shape": lambda: [
        pb.ModelInferRequest(
            model_name="decoupled_repeat",
            id="d",
            inputs=[Input(name="COUNT", datatype="INT32", shape=[2])],
            raw_input_contents=[np.int32([1, 2]).tobytes()],
        )
    ],
    "decoupled_unknown_output": lambda: [
        pb.ModelInferRequest(
            model_name="decoupled_repeat",
            id="c",
            inputs=[Input(name="COUNT", datatype="INT32", shape=[1])],
            raw_input_contents=[np.int32(1).tobytes()],
            outputs=[Output(name="NOPE")],
        )
    ],
    "not_decoupled_in_order": lambda: [_add_one(id="x1"), _add_one(id="x2"), _add_one(id="x3")],
    "not_decoupled_empty_final_parameter": lambda: [_add_one(id="x1", parameters=EMPTY_FINAL)],
    "unknown_model": lambda: [pb.ModelInferRequest(model_name="nope", id="u")],
    "bad_parameter": lambda: [_repeat(1, "p", priority=P(string_param="x"))],
    "bad_shape_then_good": lambda: [
        _add_one(
            id="b2",
            inputs=[Input(name="INPUT0", datatype="FP32", shape=[1, 15])],
            raw_input_contents=[ROW.tobytes()[:60]],
        ),
        _add_one(id="after"),
    ],
    "model_error": lambda: [
        pb.ModelInferRequest(
            model_name="fails_on_negative",
            id="f",
            inputs=[Input(name="INPUT0", datatype="FP32", shape=[1, 2])],
            raw_input_contents=[np.array([-1, 2], np.float32).tobytes()],
        )
    ],
}
GRPC_ERROR_CASES: dict[str, Callable[[], list[pb.ModelInferRequest]]] = {
    "grpc_error_unknown_model_keeps_the_stream": lambda: [
        pb.ModelInferRequest(model_name="nope", id="u"),
        _add_one(id="after"),
    ],
    "grpc_error_model_error_ends_it": lambda: [_repeat(-1, "n")],
}


@pytest.mark.parametrize("name", sorted(STREAM_CASES))
def test_stream_same_as_real_triton(name: str, stream_servers: tuple[str, str]) -> None:
    real, ours = (_stream(url, STREAM_CASES[name]()) for url in stream_servers)
    assert ours == real, name


@pytest.mark.parametrize("name", sorted(GRPC_ERROR_CASES))
def test_triton_grpc_error_mode_same_as_real_triton(
    name: str, stream_servers: tuple[str, str]
) -> None:
    header = [("triton_grpc_error", "true")]
    real, ours = (_stream(url, GRPC_ERROR_CASES[name](), metadata=header) for url in stream_servers)
    assert ours == real, name


def test_tritonclient_streams_a_python_decoupled_model(stream_servers: tuple[str, str]) -> None:
    import queue

    import tritonclient.grpc as grpcclient

    seen = []
    for url in stream_servers:
        results: queue.Queue[Any] = queue.Queue()
        client = grpcclient.InferenceServerClient(url)
        client.start_stream(callback=lambda result, error, q=results: q.put((result, error)))
        try:
            count = grpcclient.InferInput("COUNT", [1], "INT32")
            count.set_data_from_numpy(np.array([3], dtype=np.int32))
            client.async_stream_infer(
                "decoupled_repeat", [count], request_id="s", enable_empty_final_response=True
            )
            received = [results.get(timeout=30) for _ in range(4)]
        finally:
            client.stop_stream()
            client.close()
        assert all(error is None for _, error in received)
        values = [r.as_numpy("OUT").tolist() for r, _ in received[:3]]
        finals = [
            r.get_response().parameters["triton_final_response"].bool_param for r, _ in received
        ]
        seen.append((values, finals))
    assert seen[1] == seen[0] == ([[0], [1], [2]], [False, False, False, True])


# -- perf_analyzer -------------------------------------------------------------------------------
def test_perf_analyzer_over_grpc_reports_server_side_statistics(
    perf_analyzer: Path, peers: Peers, embedded_server: Server
) -> None:
    # Up to 10 windows: gRPC latency here varies by milliseconds on a busy 2-core machine,
    # and 4 windows sometimes ended without two that agreed (a flaky "unstable" exit).
    rc, output = run_perf_analyzer(
        "add_one", grpc_url_of(embedded_server), protocol="grpc", concurrency=2,
        measurement_ms=1000, extra_args=["--max-trials=10", "--stability-percentage=50"],
        peers=peers, timeout_s=120,
    )  # fmt: skip
    assert rc == 0, output
    assert "Server:" in output and "Inference count:" in output, output
    assert "Throughput:" in output
