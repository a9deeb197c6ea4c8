"""The HTTP app behind the real front end, driven by ``tritonclient.http`` and ``requests``."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.server.conftest import RunningServer, serve, serve_with_uvicorn
from tests.server.fake_core import FakeCore
from workbench.server.http import create_app

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(running: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    triton = httpclient.InferenceServerClient(running.address)
    yield triton
    triton.close()


def infer_add_one(
    client: httpclient.InferenceServerClient, binary: bool, **kwargs: Any
) -> np.ndarray:
    data = np.arange(32, dtype=np.float32).reshape(2, 16)
    tensor = httpclient.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = client.infer("add_one", [tensor], outputs=outputs, **kwargs)
    output: np.ndarray = result.as_numpy("OUTPUT0")
    np.testing.assert_array_equal(output, data + 1)
    return output


# -- tritonclient, unchanged ---------------------------------------------------------------------
def test_server_metadata_and_health(client: httpclient.InferenceServerClient) -> None:
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton" and metadata["version"] == "2.51.0"
    assert "statistics" in metadata["extensions"]
    assert "binary_tensor_data" in metadata["extensions"]
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("add_one") and not client.is_model_ready("nope")


def test_model_metadata_and_config(client: httpclient.InferenceServerClient) -> None:
    assert client.get_model_metadata("add_one")["name"] == "add_one"
    config = client.get_model_config("add_one")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [16]
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("nope")


@pytest.mark.parametrize("binary", [True, False])
def test_infer_binary_and_json(client: httpclient.InferenceServerClient, binary: bool) -> None:
    infer_add_one(client, binary)


def test_infer_all_outputs_default_binary(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    result = client.infer("add_one", [tensor], request_id="abc")
    assert result.get_response()["id"] == "abc"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.ones((1, 16)))


@pytest.mark.parametrize("binary", [True, False])
def test_infer_strings(client: httpclient.InferenceServerClient, binary: bool) -> None:
    data = np.array([b"ab", "é".encode(), b""], dtype=np.object_)
    tensor = httpclient.InferInput("INPUT0", [3], "BYTES")
    tensor.set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = client.infer("strings", [tensor], outputs=outputs)
    got = [v if isinstance(v, bytes) else v.encode() for v in result.as_numpy("OUTPUT0")]
    assert got == [b"AB", "é".encode(), b""]  # bytes.upper() is ASCII only


def test_infer_compressed_both_ways(client: httpclient.InferenceServerClient) -> None:
    for algorithm in ("gzip", "deflate"):
        infer_add_one(
            client,
            True,
            request_compression_algorithm=algorithm,
            response_compression_algorithm=algorithm,
        )


def test_classification(client: httpclient.InferenceServerClient) -> None:
    tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[0.1, 0.5, 0.3, 0.1], [0.9, 0, 0, 0.2]], np.float32))
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    result = client.infer("scores", [tensor], outputs=outputs)
    classes = result.as_numpy("OUTPUT0")
    assert classes.shape == (2, 2)
    assert classes[0].tolist() == [b"0.500000:1:dog", b"0.300000:2:bird"]
    assert classes[1].tolist() == [b"0.900000:0:cat", b"0.200000:3:fish"]


def test_statistics_and_repository(
    client: httpclient.InferenceServerClient, running: RunningServer
) -> None:
    infer_add_one(client, True)
    stats = client.get_inference_statistics("add_one")["model_stats"]
    assert stats[0]["name"] == "add_one" and stats[0]["inference_count"] >= 1
    assert len(client.get_inference_statistics()["model_stats"]) == len(running.core.configs)
    index = client.get_model_repository_index()
    assert {"name": "add_one", "version": "1", "state": "READY", "reason": ""} in index


def test_load_with_config_and_files_then_unload(
    client: httpclient.InferenceServerClient, running: RunningServer
) -> None:
    config = json.dumps(
        {"input": [{"name": "INPUT0", "data_type": "TYPE_INT32", "dims": [2]}], "output": []}
    )
    client.load_model("loaded", config=config, files={"file:1/model.py": b"print(1)\n"})
    assert running.core.loads[-1] == ("loaded", config, {"file:1/model.py": b"print(1)\n"})
    assert client.get_model_config("loaded")["input"][0]["data_type"] == "TYPE_INT32"
    client.unload_model("loaded", unload_dependents=True)
    assert not client.is_model_ready("loaded")
    with pytest.raises(InferenceServerException, match="failed to poll"):
        client.load_model("never")


def test_log_settings(client: httpclient.InferenceServerClient) -> None:
    settings = client.update_log_settings({"log_verbose_level": 1, "log_info": False})
    assert settings["log_verbose_level"] == 1 and settings["log_info"] is False
    assert client.get_log_settings()["log_format"] == "default"
    client.update_log_settings({"log_verbose_level": 0, "log_info": True})
    with pytest.raises(InferenceServerException, match="log file location"):
        client.update_log_settings({"log_file": "/tmp/x.log"})


# -- raw HTTP ------------------------------------------------------------------------------------
def test_raw_binary_request(running: RunningServer) -> None:
    data = np.arange(16, dtype=np.float32)
    reply = requests.post(
        f"{running.url}/v2/models/add_one/infer",
        data=data.tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
        timeout=10,
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/octet-stream"
    length = int(reply.headers["inference-header-content-length"])
    header = json.loads(reply.content[:length])
    assert header["outputs"][0]["shape"] == [1, 16]
    np.testing.assert_array_equal(np.frombuffer(reply.content[length:], np.float32), data + 1)


def test_json_infer_over_plain_http(running: RunningServer) -> None:
    a = {"name": "A", "datatype": "INT32", "shape": [2], "data": [1, 2]}
    b = {"name": "B", "datatype": "INT32", "shape": [2], "data": [[3], [4]]}
    body = {"inputs": [a, b]}
    reply = requests.post(f"{running.url}/v2/models/two_in/versions/1/infer", json=body, timeout=10)
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    assert reply.json()["outputs"] == [
        {"name": "SUM", "datatype": "INT32", "shape": [2], "data": [4, 6]}
    ]


SHORT_BINARY = (
    b'{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,16],'
    b'"parameters":{"binary_data_size":64}}]}'
)
BAD_REQUESTS = [
    ("GET", "/v2/nothing", None, {}, 404, "Not Found"),
    ("DELETE", "/v2", None, {}, 405, "Method Not Allowed"),
    ("GET", "/v2/models/add_one/infer", None, {}, 405, "Method Not Allowed"),
    ("POST", "/v2/models/nope/infer", b"{}", {}, 404, "unknown model"),
    ("POST", "/v2/models/add_one/versions/3/infer", b"{}", {}, 503, "not at ready state"),
    ("POST", "/v2/models/add_one/infer", b"{bad json", {}, 500, "failed to parse the request"),
    ("POST", "/v2/models/add_one/infer", b"[1]", {}, 500, "Unable to parse 'inputs'"),
    ("POST", "/v2/models/add_one/infer", SHORT_BINARY + b"\0" * 60,
     {"Inference-Header-Content-Length": str(len(SHORT_BINARY))},
     400, "expecting 4 additional bytes"),
    ("POST", "/v2/models/add_one/infer", b"{}", {"Inference-Header-Content-Length": "9"},
     400, "inference header size should be in range"),
    ("POST", "/v2/models/add_one/infer", b"123", {"Inference-Header-Content-Length": "0"},
     400, "input byte size mismatch for input 'raw_input' for model 'add_one'. Expected 64, got 3"),
    ("POST", "/v2/models/add_one/infer", b"{}", {"Content-Encoding": "br"}, 501,
     "Unsupported compression type"),
    ("POST", "/v2/models/add_one/infer", b"junk", {"Content-Encoding": "gzip"}, 400,
     "failed to decompress"),
    ("POST", "/v2/models/add_one/infer", b"x" * (2 << 20), {}, 400,
     "exceeds the maximum allowed value of 1048576 bytes"),
    ("POST", "/v2/models/decoupled/infer", b"{}", {}, 501, "decoupled transaction policy"),
    ("POST", "/v2/models/half/infer",
     b'{"inputs":[{"name":"INPUT0","datatype":"FP16","shape":[4],"data":[1,2,3,4]}]}', {},
     400, "receiving FP16 data via JSON is not supported"),
    ("GET", "/v2/models/add_one/ready", None, {}, 200, None),
    ("GET", "/v2/models/nope/ready", None, {}, 400, "Model version not ready"),
    ("GET", "/v2/models/nope/config", None, {}, 404, "unknown model"),
    ("GET", "/v2/models/nope/stats", None, {}, 404, "unknown model"),
    ("POST", "/v2/repository/index", b"{", {}, 500, "failed to parse"),
    ("POST", "/v2/repository/index", b'{"ready": 1}', {}, 500, "non-boolean"),
    ("POST", "/v2/repository/other/models/add_one/load", None, {}, 501,
     "'repository_name' specification is not supported"),
    ("POST", "/v2/repository/models/add_one/load", b'{"parameters": {"x": "y"}}', {}, 500,
     "unexpected error on creating Triton parameter"),
    ("POST", "/v2/repository/models/add_one/load", b'{"parameters": {"file:a": "abcde"}}', {},
     400, "not valid base64"),
    # Triton answers the unload's own outcome, not the parameter's parse error
    ("POST", "/v2/repository/models/nope/unload", b'{"parameters":{"unload_dependents":3}}',
     {}, 404, "unknown model"),
    ("POST", "/v2/repository/models/nope/unload", b"{bad json", {}, 404, "unknown model"),
    ("POST", "/v2/logging", b"", {}, 500, "The document is empty"),
    ("POST", "/v2/logging", b'{"log_format": "xml"}', {}, 503, "invalid argument for --log_format"),
    ("POST", "/v2/trace/setting", b'{"trace_level": ["TIMESTAMPS"]}', {}, 400,
     "Attempting to set invalid trace setting :trace file name is not given"),
    ("POST", "/v2/trace/setting", b'{"trace_file": "/tmp/t.json"}', {}, 501,
     "trace file location can not be updated through network protocol"),
    ("GET", "/v2/models/nope/trace/setting", None, {}, 400, "Request for unknown model : nope"),
    ("PUT", "/v2/trace/setting", None, {}, 405, "Method Not Allowed"),
    ("GET", "/v2/models/add_one/versions/1/trace/setting", None, {}, 404, "Not Found"),
    ("POST", "/v2/models/add_one/generate", b"{}", {}, 400, "expected 1 inputs but got 0 inputs"),
    ("GET", "/v2/systemsharedmemory/status", None, {}, 200, None),
    ("POST", "/v2/systemsharedmemory/region/r/register", b"{}", {}, 400, "has no 'key' field"),
    ("POST", "/v2/systemsharedmemory/region/r/register", b'{"key": "/wb_no_such_key",'
     b' "byte_size": 16}', {}, 500, "Unable to open shared memory region: '/wb_no_such_key'"),
    ("POST", "/v2/cudasharedmemory/region/r/register", b"{}", {}, 400, "GPUs not supported"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "error"), BAD_REQUESTS)
def test_bad_requests_answer_and_server_keeps_serving(
    running: RunningServer,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
    status: int,
    error: str | None,
) -> None:
    reply = requests.request(method, running.url + path, data=body, headers=headers, timeout=10)
    assert reply.status_code == status, reply.text
    if error is not None:
        assert error in reply.json()["error"]
        assert reply.headers["content-type"] in ("application/json", "text/plain")
    assert requests.get(f"{running.url}/v2/health/live", timeout=10).status_code == 200


def test_unsupported_encoding_lists_the_supported_ones(running: RunningServer) -> None:
    reply = requests.post(
        f"{running.url}/v2/models/add_one/infer",
        data=b"{}",
        headers={"Content-Encoding": "br"},
        timeout=10,
    )
    assert reply.headers["accept-encoding"] == "gzip, deflate"


def test_readiness_follows_the_core() -> None:
    core = FakeCore()
    core.ready = False
    for url in serve(create_app(core)):  # type: ignore[arg-type]
        assert requests.get(f"{url}/v2/health/ready", timeout=10).status_code == 400
        assert requests.get(f"{url}/v2/health/live", timeout=10).status_code == 200


def test_load_body_is_base64_per_triton(running: RunningServer) -> None:
    params = {"config": "{}", "file:1/x.bin": base64.b64encode(b"\x00\x01").decode()}
    reply = requests.post(
        f"{running.url}/v2/repository/models/add_one/load",
        json={"parameters": params},
        timeout=10,
    )
    assert reply.status_code == 200 and reply.content == b""
    assert running.core.loads[-1][2] == {"file:1/x.bin": b"\x00\x01"}


def test_the_app_is_also_plain_asgi() -> None:
    """``create_app`` stays an ASGI app (mountable in any ASGI server): the same answers
    behind uvicorn, including the size limit and a streamed generate reply."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(FakeCore(), max_input_bytes=1 << 10)  # type: ignore[arg-type]
    try:
        for url in serve_with_uvicorn(app, sock):
            triton = httpclient.InferenceServerClient(url.removeprefix("http://"))
            infer_add_one(triton, binary=True)
            triton.close()
            big = requests.post(f"{url}/v2/models/add_one/infer", data=b"x" * 2048, timeout=10)
            assert big.status_code == 400
            assert "exceeds the maximum allowed value of 1024 bytes" in big.json()["error"]
            stream = requests.post(
                f"{url}/v2/models/repeat/generate_stream", json={"COUNT": 2}, timeout=10
            )
            assert stream.status_code == 200
            assert stream.text.count("data: ") == 2
    finally:
        sock.close()
