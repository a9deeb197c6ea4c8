"""Background hosting: start/stop, ephemeral ports, errors raised in the caller."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.core.conftest import write_add_model
from workbench.errors import UnavailableError, WorkbenchError
from workbench.server.hosting import Server


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write_add_model(root, "add")
    return root


def test_background_server_serves_and_stops(repo: Path) -> None:
    server = Server(repo, http_port=0, grpc_port=0, metrics_port=0)
    with server:
        assert server.http_port > 0 and server.url == f"http://127.0.0.1:{server.http_port}"
        assert requests.get(f"{server.url}/v2/health/ready", timeout=5).status_code == 200
        body = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
            ]
        }
        reply = requests.post(f"{server.url}/v2/models/add/infer", json=body, timeout=5)
        assert reply.json()["outputs"][0]["data"] == [2, 3, 4, 5]
        assert threading.current_thread() is threading.main_thread()
    assert not server.running
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{server.url}/v2/health/live", timeout=2)


def test_port_in_use_is_raised_in_the_caller(repo: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        with pytest.raises(UnavailableError, match=f"127.0.0.1:{port}"):
            Server(repo, http_port=port).start()
    finally:
        holder.close()


def test_bad_repository_is_raised_in_the_caller(tmp_path: Path) -> None:
    with pytest.raises(WorkbenchError, match="does-not-exist"):
        Server(tmp_path / "does-not-exist", http_port=0, grpc_port=0, metrics_port=0).start()


def test_tritonclient_http_unchanged(repo: Path) -> None:
    import tritonclient.http as httpclient

    with Server(repo, http_port=0, grpc_port=0, metrics_port=0) as server:
        client = httpclient.InferenceServerClient(server.http_address)
        try:
            assert client.is_server_live() and client.is_model_ready("add")
            tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
            tensor.set_data_from_numpy(np.ones((2, 4), np.float32), binary_data=True)
            result = client.infer("add", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((2, 4), 2.0))
            stats = client.get_inference_statistics("add")["model_stats"][0]
            assert stats["inference_count"] == 2
        finally:
            client.close()


def test_grpc_and_metrics_endpoints_serve_beside_http(repo: Path) -> None:
    import tritonclient.grpc as grpcclient

    with Server(repo, http_port=0, grpc_port=0, metrics_port=0) as server:
        assert server.grpc_port > 0 and server.grpc_url == f"127.0.0.1:{server.grpc_port}"
        assert server.metrics_url == f"http://127.0.0.1:{server.metrics_port}/metrics"
        assert len({server.http_port, server.grpc_port, server.metrics_port}) == 3
        client = grpcclient.InferenceServerClient(server.grpc_url)
        try:
            assert client.is_server_live() and client.is_model_ready("add")
            tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
            tensor.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4))
            result = client.infer("add", [tensor])
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), [[1, 2, 3, 4]])
        finally:
            client.close()
        text = requests.get(server.metrics_url, timeout=5).text
        assert 'nv_inference_request_success{model="add",version="1"} 1' in text
    for port in (server.grpc_port, server.metrics_port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_grpc_and_metrics_can_be_turned_off(repo: Path) -> None:
    with Server(repo, http_port=0, allow_grpc=False, allow_metrics=False) as server:
        assert (server.grpc_port, server.metrics_port) == (0, 0)
        assert requests.get(f"{server.url}/v2/health/ready", timeout=5).status_code == 200


@pytest.mark.parametrize("busy", ["grpc_port", "metrics_port"])
def test_a_busy_grpc_or_metrics_port_fails_start_and_frees_the_http_port(
    repo: Path, busy: str
) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    http_port = probe.getsockname()[1]
    probe.close()
    try:
        port = holder.getsockname()[1]
        ports = {"http_port": http_port, "grpc_port": 0, "metrics_port": 0, busy: port}
        server = Server(repo, **ports)
        with pytest.raises(UnavailableError, match=f"127.0.0.1:{port}"):
            server.start()
        assert not server.running
    finally:
        holder.close()
    again = socket.socket()  # the failed start released its HTTP socket
    try:
        again.bind(("127.0.0.1", http_port))
    finally:
        again.close()


def test_a_wrong_repository_is_reported_before_a_busy_port(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        server = Server(tmp_path / "not-a-repo", http_port=port, allow_grpc=False)
        with pytest.raises(WorkbenchError, match="not-a-repo"):
            server.start()
    finally:
        holder.close()


def test_a_busy_grpc_port_fails_before_any_model_loads(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "initialized"
    (repo / "add" / "1" / "model.py").write_text(
        "import pathlib\n\n\nclass TritonPythonModel:\n"
        f"    def initialize(self, args):\n        pathlib.Path({str(marker)!r}).touch()\n\n"
        "    def execute(self, requests):\n        return []\n"
    )
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        with pytest.raises(UnavailableError, match=f"cannot listen on 127.0.0.1:{port}"):
            Server(repo, http_port=0, grpc_port=port, metrics_port=0).start()
    finally:
        holder.close()
    assert not marker.exists()


def test_a_server_takes_one_options_object_or_keywords_not_both(tmp_path: Path) -> None:
    from workbench.server.options import ServerOptions

    options = ServerOptions.from_keywords(http_port=0, model_control_mode="explicit")
    server = Server(tmp_path, options)
    assert server.options is options and server.options.core.control_mode == "explicit"
    assert Server(tmp_path, http_port=0, model_control_mode="explicit").options == options
    with pytest.raises(TypeError, match="options or keywords, not both"):
        Server(tmp_path, options, http_port=0)
