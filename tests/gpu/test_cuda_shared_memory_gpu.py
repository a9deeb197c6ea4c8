"""CUDA shared memory on a real GPU: ``tritonclient.utils.cuda_shared_memory`` unchanged.

The regions are device allocations made here with tritonclient's own utility (cuda-python);
the server runs in a process of its own, because a CUDA IPC handle
cannot be opened in the process that allocated it. Over HTTP and gRPC: the extension is
advertised, ``add_one`` reads its input from one region and writes its output into another,
status lists the regions, a size past the allocation is refused as 2.51 refuses it, and
unregister closes them.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from workbench.backends.tensorrt import gpu_present
from workbench.server import cuda_ipc

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_present(), reason="needs an NVIDIA GPU"),
]

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = ROOT / "tests" / "assets" / "conformance_repo"


def _cudashm() -> Any:
    try:
        import tritonclient.utils.cuda_shared_memory as cudashm
    except Exception as exc:  # noqa: BLE001 - cuda-python missing, or a 13.x without cudart
        pytest.skip(f"tritonclient's cuda_shared_memory cannot be imported: {exc}")
    return cudashm


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: the server, in a process of its own until the test closes its stdin
SERVE = """
import sys
from workbench.server.hosting import Server
repository, http_port, grpc_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with Server(repository, http_port=http_port, grpc_port=grpc_port, metrics_port=0,
            model_control_mode="explicit", load_model=["add_one"]):
    print("ready", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    """The embedded server with ``add_one`` in a process of its own: (HTTP, gRPC) addresses."""
    if cuda_ipc.driver() is None:
        pytest.skip("no NVIDIA driver library (libcuda.so.1) here")
    http_port, grpc_port = _free_port(), _free_port()
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(REPOSITORY), str(http_port), str(grpc_port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=path),
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        for line in process.stdout:  # (what else it prints goes before)
            if line == b"ready\n":
                break
        else:
            pytest.fail("the server ended before it was ready")
        yield f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
    finally:
        process.stdin.close()
        process.stdout.close()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def test_add_one_through_cuda_regions_over_http(server: tuple[str, str]) -> None:
    """The JSON tritonclient's HTTP client sends (its gevent is not on every GPU machine)."""
    cudashm = _cudashm()
    url = f"http://{server[0]}/v2"
    assert "cuda_shared_memory" in requests.get(url, timeout=30).json()["extensions"]
    source = cudashm.create_shared_memory_region("http_in", 64, 0)
    target = cudashm.create_shared_memory_region("http_out", 64, 0)
    try:
        cudashm.set_shared_memory_region(source, [np.arange(16, dtype=np.float32)])
        for name, handle, size in (("http_in", source, 64), ("http_out", target, 64)):
            body = {"raw_handle": {"b64": cudashm.get_raw_handle(handle).decode()}}
            body.update(device_id=0, byte_size=size)
            register = f"{url}/cudasharedmemory/region/{name}/register"
            reply = requests.post(register, json=body, timeout=30)
            assert reply.status_code == 200, reply.text
        status = requests.get(f"{url}/cudasharedmemory/status", timeout=30).json()
        assert sorted(r["name"] for r in status) == ["http_in", "http_out"]
        assert status[0] == {"name": "http_in", "device_id": 0, "byte_size": 64}

        region = {"shared_memory_region": "http_in", "shared_memory_byte_size": 64}
        inputs = [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "parameters": region}]
        region = {"shared_memory_region": "http_out", "shared_memory_byte_size": 64}
        outputs = [{"name": "OUTPUT0", "parameters": region}]
        reply = requests.post(
            f"{url}/models/add_one/infer", json={"inputs": inputs, "outputs": outputs}, timeout=30
        )
        assert reply.status_code == 200, reply.text
        got = cudashm.get_contents_as_numpy(target, np.float32, [1, 16])
        assert got.ravel().tolist() == [float(i + 1) for i in range(16)]

        body = {"raw_handle": {"b64": cudashm.get_raw_handle(target).decode()}}
        body.update(device_id=0, byte_size=1 << 30)  # past the allocation, as 2.51 checks it
        reply = requests.post(f"{url}/cudasharedmemory/region/big/register", json=body, timeout=30)
        assert (reply.status_code, reply.json()) == (
            400,
            {"error": "failed to register shared memory region 'big': invalid args"},
        )
        assert requests.post(f"{url}/cudasharedmemory/unregister", timeout=30).ok
        assert requests.get(f"{url}/cudasharedmemory/status", timeout=30).json() == []
    finally:
        cudashm.destroy_shared_memory_region(source)
        cudashm.destroy_shared_memory_region(target)


def test_add_one_through_cuda_regions_over_grpc(server: tuple[str, str]) -> None:
    """tritonclient's gRPC client, unchanged."""
    cudashm = _cudashm()
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server[1])
    assert "cuda_shared_memory" in client.get_server_metadata().extensions
    source = cudashm.create_shared_memory_region("grpc_in", 64, 0)
    target = cudashm.create_shared_memory_region("grpc_out", 64, 0)
    try:
        cudashm.set_shared_memory_region(source, [np.arange(16, dtype=np.float32)])
        client.register_cuda_shared_memory("grpc_in", cudashm.get_raw_handle(source), 0, 64)
        client.register_cuda_shared_memory("grpc_out", cudashm.get_raw_handle(target), 0, 64)
        status = client.get_cuda_shared_memory_status()
        assert sorted(status.regions) == ["grpc_in", "grpc_out"]

        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_shared_memory("grpc_in", 64)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("grpc_out", 64)
        client.infer("add_one", [tensor], outputs=[output])
        got = cudashm.get_contents_as_numpy(target, np.float32, [1, 16])
        assert got.ravel().tolist() == [float(i + 1) for i in range(16)]

        with pytest.raises(Exception, match="failed to register shared memory region 'big'"):
            client.register_cuda_shared_memory("big", cudashm.get_raw_handle(target), 0, 1 << 30)
        client.unregister_cuda_shared_memory()
        assert list(client.get_cuda_shared_memory_status().regions) == []
    finally:
        cudashm.destroy_shared_memory_region(source)
        cudashm.destroy_shared_memory_region(target)
