"""Restricted API groups side by side: real tritonserver 2.51 and the embedded server.

Both start with the same ``--http-restricted-api`` and ``--grpc-restricted-protocol`` flags and
get the same requests without, with a wrong and with the right header. Status, body and
content type must match. HTTP health stays unrestricted here because the real server's start-up
wait polls it (``test_access.py``'s ``test_restricted_health_...`` covers it on our side); gRPC
health is restricted with a key of its own.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.integration.capture_golden import Case, send
from tests.integration.peers import Peers, TritonServerProcess, copy_repository
from workbench.server.hosting import Server

CONFORMANCE_REPO = Path(__file__).resolve().parents[1] / "assets" / "conformance_repo"
HTTP_FLAGS = (
    "metadata,inference,shared-memory:infer-key=i1",
    "model-config,model-repository,statistics,trace,logging:Admin-Key=secret",
)
GRPC_FLAGS = (
    "metadata,inference,shared-memory,model-config,model-repository,statistics,trace,logging"
    ":admin-key=secret",
    "health:probe=ok",
)
INFER_BODY = {
    "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}]
}

#: (name, method, path, body, header that opens it) for each restricted HTTP group
HTTP_REQUESTS: list[tuple[str, str, str, Any, tuple[str, str]]] = [
    ("server_metadata", "GET", "/v2", None, ("infer-key", "i1")),
    ("model_metadata", "GET", "/v2/models/add_one", None, ("infer-key", "i1")),
    ("infer", "POST", "/v2/models/add_one/infer", INFER_BODY, ("infer-key", "i1")),
    ("infer_unknown_model", "POST", "/v2/models/nope/infer", INFER_BODY, ("infer-key", "i1")),
    ("generate", "POST", "/v2/models/add_one/generate", {"INPUT0": [0] * 16}, ("infer-key", "i1")),
    ("shm_status", "GET", "/v2/systemsharedmemory/status", None, ("infer-key", "i1")),
    ("config", "GET", "/v2/models/add_one/config", None, ("Admin-Key", "secret")),
    ("index", "POST", "/v2/repository/index", b"", ("Admin-Key", "secret")),
    ("stats_all", "GET", "/v2/models/stats", None, ("Admin-Key", "secret")),
    ("stats_model", "GET", "/v2/models/add_one/stats", None, ("Admin-Key", "secret")),
    ("trace", "GET", "/v2/trace/setting", None, ("Admin-Key", "secret")),
    ("logging", "GET", "/v2/logging", None, ("Admin-Key", "secret")),
    # the restriction is checked before the method: 403, not 405
    ("index_wrong_method", "GET", "/v2/repository/index", None, ("Admin-Key", "secret")),
]
#: opened, these answer differently by design
ANSWERED_DIFFERENTLY = {"shm_status", "logging"}


@pytest.fixture(scope="module")
def both(
    peers: Peers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TritonServerProcess, Server]]:
    workdir = tmp_path_factory.mktemp("restricted")
    triton_repo = copy_repository(CONFORMANCE_REPO, workdir / "triton_repo")
    flags = [f"--http-restricted-api={f}" for f in HTTP_FLAGS]
    flags += [f"--grpc-restricted-protocol={f}" for f in GRPC_FLAGS]
    ours = Server(
        copy_repository(CONFORMANCE_REPO, workdir / "our_repo"),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=["*"],
        http_restricted_api=HTTP_FLAGS,
        grpc_restricted_protocol=GRPC_FLAGS,
    )
    with (
        TritonServerProcess(
            peers, triton_repo, log_path=workdir / "tritonserver.log", extra_args=flags
        ) as triton,
        ours,
    ):
        yield triton, ours


def _answer(port: int, method: str, path: str, body: Any, headers: dict[str, str]) -> Any:
    reply = send(port, Case("restricted", method, path, body, headers))
    return reply["status"], reply["headers"].get("content-type"), reply["body"]


@pytest.mark.integration
@pytest.mark.conformance
@pytest.mark.parametrize(("name", "method", "path", "body", "opener"), HTTP_REQUESTS)
def test_http_restricted_groups_answer_as_triton(
    both: tuple[TritonServerProcess, Server],
    name: str,
    method: str,
    path: str,
    body: Any,
    opener: tuple[str, str],
) -> None:
    triton, ours = both
    key, value = opener
    attempts = {
        "no header": {},
        "wrong value": {key: value.upper() + "x"},
        "other header": {"x-" + key: value},
    }
    for label, headers in attempts.items():
        real = _answer(triton.http_port, method, path, body, headers)
        assert real[0] == 403, (name, label, real)
        assert _answer(ours.http_port, method, path, body, headers) == real, (name, label)
    # the header's name in any case opens it; the value must match exactly
    for headers in ({key: value}, {key.lower(): value}, {key.upper(): value}):
        real = _answer(triton.http_port, method, path, body, headers)
        mine = _answer(ours.http_port, method, path, body, headers)
        assert real[0] != 403 and mine[0] != 403, (name, headers, real, mine)
        if name not in ANSWERED_DIFFERENTLY:
            assert mine[0] == real[0], (name, headers, real, mine)


@pytest.mark.integration
@pytest.mark.conformance
def test_http_the_first_of_repeated_headers_decides(
    both: tuple[TritonServerProcess, Server],
) -> None:
    def index(port: int, values: tuple[str, ...]) -> int:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.putrequest("POST", "/v2/repository/index")
            for value in values:
                connection.putheader("admin-key", value)
            connection.putheader("Content-Length", "0")
            connection.endheaders()
            return connection.getresponse().status
        finally:
            connection.close()

    triton, ours = both
    for values in (("secret", "other"), ("other", "secret")):
        real = index(triton.http_port, values)
        assert index(ours.http_port, values) == real, values
    assert index(ours.http_port, ("secret", "other")) == 200
    assert index(ours.http_port, ("other", "secret")) == 403


@pytest.mark.integration
@pytest.mark.conformance
def test_unrestricted_and_unknown_paths_are_untouched(
    both: tuple[TritonServerProcess, Server],
) -> None:
    triton, ours = both
    for method, path in (("GET", "/v2/health/ready"), ("GET", "/v2/models/add_one/ready")):
        real = _answer(triton.http_port, method, path, None, {})
        assert real[0] == 200
        assert _answer(ours.http_port, method, path, None, {}) == real
    real = _answer(triton.http_port, "GET", "/v2/nothing/here", None, {})
    assert _answer(ours.http_port, "GET", "/v2/nothing/here", None, {}) == real


#: one unary call per restricted gRPC group
GRPC_CALLS: list[tuple[str, Any]] = [
    ("ServerMetadata", pb.ServerMetadataRequest()),
    ("ModelMetadata", pb.ModelMetadataRequest(name="add_one")),
    ("ModelConfig", pb.ModelConfigRequest(name="add_one")),
    ("ModelStatistics", pb.ModelStatisticsRequest(name="add_one")),
    ("RepositoryIndex", pb.RepositoryIndexRequest()),
    ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="not_there")),
    ("LogSettings", pb.LogSettingsRequest()),
    ("TraceSetting", pb.TraceSettingRequest()),
    ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest()),
    ("ModelInfer", pb.ModelInferRequest(model_name="nope")),
]


def _grpc(url: str, rpc: str, request: Any, metadata: tuple[tuple[str, str], ...]) -> Any:
    with grpc.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            getattr(stub, rpc)(request, metadata=metadata, timeout=30)
        except grpc.RpcError as error:
            failure: Any = error
            return failure.code().name, failure.details()
    return "OK", ""


@pytest.mark.integration
@pytest.mark.conformance
@pytest.mark.parametrize(("rpc", "request_message"), GRPC_CALLS, ids=[c[0] for c in GRPC_CALLS])
def test_grpc_restricted_protocols_answer_as_triton(
    both: tuple[TritonServerProcess, Server], rpc: str, request_message: Any
) -> None:
    triton, ours = both
    refusals = (
        (),
        (("triton-grpc-protocol-admin-key", "wrong"),),
        (("admin-key", "secret"),),  # without the prefix
    )
    for metadata in refusals:
        real = _grpc(triton.grpc_url, rpc, request_message, metadata)
        assert real[0] == "UNAVAILABLE" and "restricted" in real[1], (rpc, real)
        assert _grpc(ours.grpc_url, rpc, request_message, metadata) == real, (rpc, metadata)
    opened = (("triton-grpc-protocol-admin-key", "secret"),)
    real = _grpc(triton.grpc_url, rpc, request_message, opened)
    mine = _grpc(ours.grpc_url, rpc, request_message, opened)
    assert "restricted" not in real[1] and "restricted" not in mine[1], (rpc, real, mine)
    if rpc not in ("TraceSetting", "SystemSharedMemoryStatus", "LogSettings"):
        assert mine == real, rpc


#: the calls of the ``health`` group, restricted by ``GRPC_FLAGS``' own ``probe`` key
GRPC_HEALTH_CALLS: list[tuple[str, Any]] = [
    ("ServerLive", pb.ServerLiveRequest()),
    ("ServerReady", pb.ServerReadyRequest()),
    ("ModelReady", pb.ModelReadyRequest(name="add_one")),
]


@pytest.mark.integration
@pytest.mark.conformance
@pytest.mark.parametrize(
    ("rpc", "request_message"), GRPC_HEALTH_CALLS, ids=[c[0] for c in GRPC_HEALTH_CALLS]
)
def test_grpc_restricted_health_answers_as_triton(
    both: tuple[TritonServerProcess, Server], rpc: str, request_message: Any
) -> None:
    triton, ours = both
    refusals = (
        (),
        (("triton-grpc-protocol-probe", "wrong"),),
        (("probe", "ok"),),  # without the prefix
        (("triton-grpc-protocol-admin-key", "secret"),),  # another group's key
    )
    refused = (
        "UNAVAILABLE",
        "This protocol is restricted, expecting header 'triton-grpc-protocol-probe'",
    )
    for metadata in refusals:
        assert _grpc(triton.grpc_url, rpc, request_message, metadata) == refused, metadata
        assert _grpc(ours.grpc_url, rpc, request_message, metadata) == refused, metadata
    opened = (("triton-grpc-protocol-probe", "ok"),)
    assert _grpc(triton.grpc_url, rpc, request_message, opened) == ("OK", "")
    assert _grpc(ours.grpc_url, rpc, request_message, opened) == ("OK", "")


@pytest.mark.integration
@pytest.mark.conformance
def test_grpc_stream_and_tritonclient_headers(both: tuple[TritonServerProcess, Server]) -> None:
    triton, ours = both
    for server_url in (triton.grpc_url, ours.grpc_url):
        client = grpcclient.InferenceServerClient(server_url)
        try:
            assert client.is_server_live(headers={"triton-grpc-protocol-probe": "ok"})
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                client.get_model_repository_index()
            opened = {"triton-grpc-protocol-admin-key": "secret"}
            index = client.get_model_repository_index(headers=opened)
            assert {model.name for model in index.models} >= {"add_one"}
            tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
            tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
            result = client.infer("add_one", [tensor], headers=opened)
            assert result.as_numpy("OUTPUT0").tolist() == [[1.0] * 16]
        finally:
            client.close()
        assert _stream_error(server_url) == (
            "UNAVAILABLE",
            "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'",
        )


def _stream_error(url: str) -> tuple[str, str]:
    request = pb.ModelInferRequest(model_name="add_one")
    with grpc.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            for _ in stub.ModelStreamInfer(iter([request]), timeout=30):
                pass
        except grpc.RpcError as error:
            failure: Any = error
            return failure.code().name, failure.details()
    return "OK", ""
