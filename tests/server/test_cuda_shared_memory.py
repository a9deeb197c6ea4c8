"""CUDA shared memory with a fake driver (``fake_cuda.py``): registry and both front ends.

The texts are tritonserver 2.51's (a GPU build, asked on a machine without a GPU for the
register body's errors, and read from ``shared_memory_manager.cc`` for what needs a device).
``tests/gpu/test_cuda_shared_memory_gpu.py`` runs the same through the real driver, with
``tritonclient.utils.cuda_shared_memory`` making the regions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.server.add_one_server import add_one_server
from tests.server.fake_cuda import FakeCudaDriver
from workbench._types import Tensor
from workbench.core.request import InferResponse, SharedMemoryUse
from workbench.errors import AlreadyExistsError, InternalError, InvalidArgumentError, NotFoundError
from workbench.server import cuda_ipc
from workbench.server.hosting import Server
from workbench.server.http.endpoints import server_extensions
from workbench.server.http.shared_memory import cuda_register_arguments
from workbench.server.shared_memory import CUDA, SharedMemoryRegistry, write_outputs


@pytest.fixture
def fake() -> FakeCudaDriver:
    return FakeCudaDriver()


@pytest.fixture
def registry(fake: FakeCudaDriver) -> Iterator[SharedMemoryRegistry]:
    regions = SharedMemoryRegistry(cuda=fake)
    yield regions
    regions.close()


# -- the registry ---------------------------------------------------------------------------------
def test_register_status_and_unregister(
    registry: SharedMemoryRegistry, fake: FakeCudaDriver
) -> None:
    handle, address = fake.allocate(64)
    registry.register_cuda("c", handle, 0, 64)
    assert registry.status("", CUDA) == [{"name": "c", "device_id": 0, "byte_size": 64}]
    assert registry.status("c", CUDA) == [{"name": "c", "device_id": 0, "byte_size": 64}]
    assert registry.status() == []  # no system region
    with pytest.raises(NotFoundError) as info:
        registry.status("c")
    assert str(info.value) == (
        "The region named 'c' is registered as CUDA shared memory, not system shared memory"
    )
    registry.unregister("c")  # a system unregister leaves a CUDA region alone
    assert fake.opened[address] == 1
    registry.unregister("c", CUDA)
    assert registry.status("", CUDA) == [] and fake.opened[address] == 0


def test_names_are_unique_across_kinds_and_unregister_all_closes_every_handle(
    registry: SharedMemoryRegistry, fake: FakeCudaDriver
) -> None:
    first, a = fake.allocate(16)
    second, b = fake.allocate(16)
    registry.register_cuda("a", first, 0, 16)
    registry.register_cuda("b", second, 0, 16)
    with pytest.raises(AlreadyExistsError, match="shared memory region 'a' already in manager"):
        registry.register_cuda("a", second, 0, 16)
    registry.unregister("", CUDA)
    assert sorted(fake.closed) == [a, b] and registry.regions == {}


def test_a_handle_that_opens_nothing_or_a_size_past_the_allocation_is_invalid(
    registry: SharedMemoryRegistry, fake: FakeCudaDriver
) -> None:
    handle, address = fake.allocate(64)
    for wrong in (bytes(64), handle[:10]):
        with pytest.raises(InvalidArgumentError) as info:
            registry.register_cuda("c", wrong, 0, 64)
        assert str(info.value) == "failed to register shared memory region: invalid args"
    with pytest.raises(InvalidArgumentError, match="invalid args"):
        registry.register_cuda("c", handle, 3, 64)  # no such device
    with pytest.raises(InvalidArgumentError) as info:
        registry.register_cuda("c", handle, 0, 65)
    assert str(info.value) == "failed to register shared memory region 'c': invalid args"
    assert fake.closed == [address] and registry.regions == {}  # the handle was closed again


def test_without_a_gpu_registering_is_refused_as_by_a_build_without_one() -> None:
    with pytest.raises(InvalidArgumentError) as info:
        SharedMemoryRegistry().register_cuda("c", bytes(64), 0, 64)
    assert str(info.value) == (
        "failed to register CUDA shared memory region: 'c', GPUs not supported"
    )
    assert "cuda_shared_memory" not in server_extensions(False)
    extensions = server_extensions(True)
    at = extensions.index("system_shared_memory")
    assert extensions[at + 1] == "cuda_shared_memory"  # where Triton lists it


def test_inputs_are_copied_out_outputs_copied_in_and_in_use_until_released(
    registry: SharedMemoryRegistry, fake: FakeCudaDriver
) -> None:
    handle, address = fake.allocate(128)
    fake.array(address)[:16] = np.arange(16, dtype=np.float32)
    registry.register_cuda("c", handle, 0, 128)
    use = SharedMemoryUse()
    data = registry.lease(use, "c", 0, 64)
    fake.array(address)[0] = 99  # the request holds a copy, not the device's bytes
    assert np.frombuffer(data, np.float32).tolist() == list(range(16))
    use.outputs["OUT"] = registry.lease_output(use, "c", 64, 64)
    with pytest.raises(InternalError, match="'c', it is currently in use"):
        registry.unregister("c", CUDA)
    write_outputs(use, _response("OUT", np.full(16, 5, np.float32)))
    assert fake.array(address)[16:].tolist() == [5.0] * 16
    use.release()
    registry.unregister("c", CUDA)


def test_an_output_larger_than_its_place_and_offsets_past_the_region(
    registry: SharedMemoryRegistry, fake: FakeCudaDriver
) -> None:
    handle, _ = fake.allocate(64)
    registry.register_cuda("c", handle, 0, 64)
    use = SharedMemoryUse()
    use.outputs["OUT"] = registry.lease_output(use, "c", 32, 32)
    with pytest.raises(InternalError, match=r"\(32 bytes\) should be at least 64 bytes"):
        write_outputs(use, _response("OUT", np.zeros(16, np.float32)))
    with pytest.raises(InvalidArgumentError, match="Invalid offset for shared memory region"):
        registry.lease(use, "c", 64, 4)
    with pytest.raises(InvalidArgumentError, match="Invalid offset \\+ byte size"):
        registry.lease(use, "c", 32, 33)


def _response(name: str, array: np.ndarray) -> InferResponse:
    return InferResponse("m", "1", outputs=[Tensor(name, "FP32", array)])


# -- the register body (texts of tritonserver 2.51, a GPU build) ----------------------------------
H64 = "A" * 86 + "=="  # 64 zero bytes


@pytest.mark.parametrize(
    ("body", "error", "text"),
    [
        ([1], InvalidArgumentError, "Shared memory register request has no 'raw_handle' field"),
        ({}, InvalidArgumentError, "Shared memory register request has no 'raw_handle' field"),
        ({"raw_handle": "x"}, InternalError, "attempt to access non-existing object member 'b64'"),
        ({"raw_handle": {}}, InternalError, "attempt to access non-existing object member 'b64'"),
        ({"raw_handle": {"b64": 3}}, InternalError, "attempt to access JSON non-string as string"),
        (
            {"raw_handle": {"b64": H64}, "device_id": 0},
            InternalError,
            "attempt to access non-existing object member 'byte_size'",
        ),
        (
            {"raw_handle": {"b64": H64}, "device_id": 0, "byte_size": -1},
            InternalError,
            "attempt to access JSON non-unsigned-integer as unsigned-integer",
        ),
        (
            {"raw_handle": {"b64": H64}, "byte_size": 64},
            InternalError,
            "attempt to access non-existing object member 'device_id'",
        ),
        (
            {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64},
            InvalidArgumentError,
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ),
        (
            {"raw_handle": {"b64": "!!!!"}, "device_id": 0, "byte_size": 64},
            InvalidArgumentError,
            "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t",
        ),
    ],
)
def test_register_body_errors(body: object, error: type[Exception], text: str) -> None:
    with pytest.raises(error) as info:
        cuda_register_arguments(json.dumps(body).encode())
    assert str(info.value) == text


def test_register_body_read() -> None:
    body = {"raw_handle": {"b64": H64}, "device_id": 1, "byte_size": 64}
    assert cuda_register_arguments(json.dumps(body).encode()) == (bytes(64), 1, 64)


# -- both front ends, infer through CUDA regions --------------------------------------------------
@pytest.fixture
def served(fake: FakeCudaDriver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    monkeypatch.setattr(cuda_ipc, "driver", lambda: fake)
    with add_one_server() as server:
        yield server


@pytest.mark.integration
def test_add_one_through_cuda_regions_over_http_and_grpc(
    served: Server, fake: FakeCudaDriver
) -> None:
    http = httpclient.InferenceServerClient(served.http_address)
    rpc = grpcclient.InferenceServerClient(served.grpc_url)
    assert "cuda_shared_memory" in http.get_server_metadata()["extensions"]
    assert "cuda_shared_memory" in rpc.get_server_metadata().extensions
    for client, tag in ((http, "h"), (rpc, "g")):
        module = httpclient if client is http else grpcclient
        in_handle, in_address = fake.allocate(64)
        out_handle, out_address = fake.allocate(64)
        fake.array(in_address)[:] = np.arange(16, dtype=np.float32)
        client.register_cuda_shared_memory(f"{tag}in", fake.b64(in_handle).encode(), 0, 64)
        client.register_cuda_shared_memory(f"{tag}out", fake.b64(out_handle).encode(), 0, 64)
        tensor = module.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_shared_memory(f"{tag}in", 64)
        output = module.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory(f"{tag}out", 64)
        result = client.infer("add_one", [tensor], outputs=[output])
        assert result.get_output("OUTPUT0") is not None
        assert fake.array(out_address).tolist() == [float(i + 1) for i in range(16)]
        client.unregister_cuda_shared_memory(f"{tag}in")
        client.unregister_cuda_shared_memory(f"{tag}out")
        assert fake.opened[in_address] == fake.opened[out_address] == 0


@pytest.mark.integration
def test_status_and_register_errors_over_http_and_grpc(
    served: Server, fake: FakeCudaDriver
) -> None:
    handle, _ = fake.allocate(32)
    base = f"http://{served.http_address}/v2/cudasharedmemory"
    body = {"raw_handle": {"b64": fake.b64(handle)}, "device_id": 0, "byte_size": 32}
    assert requests.post(f"{base}/region/c/register", json=body, timeout=30).status_code == 200
    status = requests.get(f"{base}/status", timeout=30)
    assert status.json() == [{"name": "c", "device_id": 0, "byte_size": 32}]
    again = requests.post(f"{base}/region/c/register", json=body, timeout=30)
    assert (again.status_code, again.json()) == (
        400,  # Triton answers ALREADY_EXISTS with 400 (``server/status.py``)
        {"error": "shared memory region 'c' already in manager"},
    )
    system = requests.get(
        f"http://{served.http_address}/v2/systemsharedmemory/region/c/status", timeout=30
    )
    assert system.status_code == 404 and "registered as CUDA shared memory" in system.text
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(served.grpc_url))
    reply = stub.CudaSharedMemoryStatus(pb.CudaSharedMemoryStatusRequest(name="c"))
    assert (reply.regions["c"].device_id, reply.regions["c"].byte_size) == (0, 32)
    with pytest.raises(grpc.RpcError) as info:
        stub.CudaSharedMemoryRegister(pb.CudaSharedMemoryRegisterRequest(name="g", byte_size=8))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == "failed to register shared memory region: invalid args"
    stub.CudaSharedMemoryUnregister(pb.CudaSharedMemoryUnregisterRequest())
    assert requests.get(f"{base}/status", timeout=30).json() == []
