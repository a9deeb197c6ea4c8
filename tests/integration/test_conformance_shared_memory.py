"""System shared memory side by side: real Triton 2.51 and the embedded server answer the same.

Each side gets its own POSIX shared-memory objects, made with ``tritonclient.utils.shared_memory``
exactly as a Triton user makes them (keys differ only in the side's name, which is taken out
before comparing). Before every test the same regions are registered on both servers; after
it every region is unregistered. A case is one request (HTTP or gRPC) sent to both: status,
content type and body (or gRPC code and message, or the response message) must be the same,
and so must the bytes an infer writes into its output regions.

Triton 2.51's bugs are kept out of the shared cases and checked on our side only in
``test_where_triton_2_51_misbehaves``: a second region of a key already registered (2.51
reuses a closed descriptor and fails, or maps whatever that descriptor has become), a region
registered at an offset (2.51 adds the offset twice when reading), and CUDA registration on
this machine without a GPU (pytriton's build has GPU support and parses the body before it
fails; we answer as a build without it. CUDA regions themselves: ``tests/server/
test_cuda_shared_memory.py`` with a fake driver, ``tests/gpu/`` on a GPU).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import serialize_byte_tensor

from tests.integration.peers import TritonServerProcess
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

SIDES = ("triton", "ours")
P = pb.InferParameter
STRINGS = serialize_byte_tensor(np.array([b"abc", b"de"], dtype=np.object_)).item()
#: name -> byte size of each object; the first ones are registered (same name, offset 0)
OBJECTS = {"in": 64, "out": 64, "small": 32, "strs": 64, "strout": 64, "pair": 256}
SPARE = {"spare": 256, "big": 8192, "offset": 8192, "shared": 64}
REGISTERED = tuple(OBJECTS)


def key(side: str, name: str) -> str:
    return f"/wb_conf_{os.getpid()}_{side}_{name}"


@dataclass
class Side:
    """One server: its HTTP base URL, gRPC target and shared-memory objects."""

    name: str
    http: str
    grpc: str
    handles: dict[str, Any]

    def normalize(self, text: str) -> str:
        return text.replace(f"_{self.name}_", "_SIDE_")

    def stub(self) -> service_pb2_grpc.GRPCInferenceServiceStub:
        return service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(self.grpc))

    def contents(self, name: str, size: int) -> bytes:
        array = shm.get_contents_as_numpy(self.handles[name], np.uint8, [size])
        return bytes(array)


@pytest.fixture(scope="module")
def sides(real_triton: TritonServerProcess, embedded_server: Server) -> Iterator[dict[str, Side]]:
    urls = {
        "triton": (f"http://{real_triton.http_url}", real_triton.grpc_url),
        "ours": (embedded_server.url, embedded_server.grpc_url),
    }
    result = {}
    for side in SIDES:
        handles = {
            name: shm.create_shared_memory_region(name, key(side, name), size)
            for name, size in {**OBJECTS, **SPARE}.items()
        }
        result[side] = Side(side, *urls[side], handles)
    try:
        yield result
    finally:
        for side in result.values():
            for handle in side.handles.values():
                shm.destroy_shared_memory_region(handle)


@pytest.fixture
def both(sides: dict[str, Side]) -> Iterator[dict[str, Side]]:
    """The sides with fresh contents and the standard regions registered; unregistered after."""
    for side in sides.values():
        for name, size in {**OBJECTS, **SPARE}.items():
            shm.set_shared_memory_region(side.handles[name], [np.zeros(size, np.uint8)])
        shm.set_shared_memory_region(side.handles["in"], [np.arange(16, dtype=np.float32)])
        shm.set_shared_memory_region(side.handles["strs"], [np.frombuffer(STRINGS, np.uint8)])
        pair = [np.arange(4, dtype=np.float32), np.arange(4, dtype=np.int32) * 2]
        shm.set_shared_memory_region(side.handles["pair"], pair)
        for name in REGISTERED:
            body = {"key": key(side.name, name), "offset": 0, "byte_size": OBJECTS[name]}
            reply = requests.post(f"{side.http}/v2/systemsharedmemory/region/{name}/register",
                                  json=body, timeout=30)  # fmt: skip
            assert reply.status_code == 200, reply.text
    try:
        yield sides
    finally:
        for side in sides.values():
            requests.post(f"{side.http}/v2/systemsharedmemory/unregister", timeout=30)


# -- HTTP ------------------------------------------------------------------------------------------
def _http(side: Side, method: str, path: str, body: Any) -> tuple[int, str, str]:
    if isinstance(body, dict | list):
        data = json.dumps(body).replace("_SIDE_", f"_{side.name}_").encode()
    else:
        data = body
    reply = requests.request(method, side.http + path, data=data, timeout=60)
    text = reply.content.decode("utf-8", "replace")
    return reply.status_code, reply.headers.get("content-type", ""), side.normalize(text)


def _register(name: str, **body: Any) -> tuple[str, str, Any]:
    return "POST", f"/v2/systemsharedmemory/region/{name}/register", body


def _sk(name: str) -> str:
    """A key in a request body (``_http`` puts the side's name in)."""
    return key("SIDE", name)


REGISTER_CASES: dict[str, tuple[str, str, Any]] = {
    "duplicate_name": _register("in", key=_sk("in"), byte_size=64),
    "unknown_key": _register("x", key=_sk("missing"), byte_size=64),
    "key_with_inner_slash": _register("x", key=_sk("spare") + "/x", byte_size=8),
    "empty_key": _register("x", key="", byte_size=8),
    "beyond_the_object": _register("x", key=_sk("spare"), byte_size=257),
    "offset_beyond_the_object": _register("x", key=_sk("spare"), offset=256, byte_size=1),
    "offset_not_page_aligned": _register("x", key=_sk("big"), offset=8, byte_size=16),
    "zero_byte_size": _register("x", key=_sk("spare"), offset=0, byte_size=0),
    "no_key": _register("x", byte_size=64),
    "no_byte_size": _register("x", key=_sk("spare")),
    "key_not_a_string": _register("x", key=5, byte_size=64),
    "offset_a_string": _register("x", key=_sk("spare"), offset="0", byte_size=64),
    "offset_negative": _register("x", key=_sk("spare"), offset=-1, byte_size=64),
    "byte_size_a_string": _register("x", key=_sk("spare"), byte_size="64"),
    "body_not_json": ("POST", "/v2/systemsharedmemory/region/x/register", b"{nope"),
    "body_an_array": ("POST", "/v2/systemsharedmemory/region/x/register", [1]),
    "body_empty": ("POST", "/v2/systemsharedmemory/region/x/register", b""),
    "no_region_name": ("POST", "/v2/systemsharedmemory/register", {"key": "k", "byte_size": 8}),
    "register_with_get": ("GET", "/v2/systemsharedmemory/region/x/register", None),
    "status_with_post": ("POST", "/v2/systemsharedmemory/status", None),
    "unregister_with_get": ("GET", "/v2/systemsharedmemory/region/in/unregister", None),
    "status_all": ("GET", "/v2/systemsharedmemory/status", None),
    "status_one": ("GET", "/v2/systemsharedmemory/region/pair/status", None),
    "status_unknown": ("GET", "/v2/systemsharedmemory/region/nope/status", None),
    "cuda_status_all": ("GET", "/v2/cudasharedmemory/status", None),
    "cuda_status_of_a_system_region": ("GET", "/v2/cudasharedmemory/region/in/status", None),
    "cuda_status_unknown": ("GET", "/v2/cudasharedmemory/region/nope/status", None),
    "cuda_register_without_name": ("POST", "/v2/cudasharedmemory/register", {}),
    "cuda_unregister_of_a_system_region": (
        "POST", "/v2/cudasharedmemory/region/in/unregister", None),
    "cuda_unregister_all": ("POST", "/v2/cudasharedmemory/unregister", None),
    "unregister_unknown": ("POST", "/v2/systemsharedmemory/region/nope/unregister", None),
}  # fmt: skip


def _region(name: str, size: int, offset: int | None = None, **more: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"shared_memory_region": name, "shared_memory_byte_size": size}
    if offset is not None:
        params["shared_memory_offset"] = offset
    return {**params, **more}


def _add_one(input_params: Any = None, *outputs: dict[str, Any], **document: Any) -> Any:
    tensor: dict[str, Any] = {"name": "INPUT0", "datatype": "FP32", "shape": [1, 16]}
    tensor["parameters"] = _region("in", 64) if input_params is None else input_params
    body = {"inputs": [tensor], **document}
    if outputs:
        body["outputs"] = [{"name": "OUTPUT0", "parameters": params} for params in outputs]
    return ("POST", "/v2/models/add_one/infer", body)


def _echo(input_params: dict[str, Any], *outputs: dict[str, Any]) -> Any:
    tensor = {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2], "parameters": input_params}
    body: dict[str, Any] = {"inputs": [tensor]}
    if outputs:
        body["outputs"] = [{"name": "OUTPUT0", "parameters": params} for params in outputs]
    return ("POST", "/v2/models/echo_bytes/infer", body)


def _pair(out_int32: dict[str, Any], out_fp32: dict[str, Any], int32_in_region: bool) -> Any:
    """identity_all with FP32 and INT32 inputs from the ``pair`` region (outputs asked for in
    the model's order, which is the order both servers answer in)."""
    fp32 = {
        "name": "IN_FP32",
        "datatype": "FP32",
        "shape": [1, 4],
        "parameters": _region("pair", 16),
    }
    int32: dict[str, Any] = {"name": "IN_INT32", "datatype": "INT32", "shape": [1, 4]}
    int32["parameters"] = _region("pair", 16, 16) if int32_in_region else {}
    if not int32_in_region:
        int32["data"] = [5, 6, 7, 8]
    outputs = [{"name": "OUT_INT32", "parameters": out_int32},
               {"name": "OUT_FP32", "parameters": out_fp32}]  # fmt: skip
    return ("POST", "/v2/models/identity_all/infer", {"inputs": [fp32, int32], "outputs": outputs})


INFER_CASES: dict[str, tuple[str, str, Any]] = {
    "input_in_region_output_as_json": _add_one(),
    "input_and_output_in_regions": _add_one(None, _region("out", 64)),
    "output_in_region_binary_data_false": _add_one(None, _region("out", 64, binary_data=False)),
    "output_in_region_binary_data_true": _add_one(None, _region("out", 64, binary_data=True)),
    "output_in_region_binary_data_not_bool": _add_one(None, _region("out", 64, binary_data=1)),
    "output_in_region_and_classification": _add_one(None, _region("out", 64, classification=2)),
    "output_region_too_small": _add_one(None, _region("small", 32)),
    "output_byte_size_too_small": _add_one(None, _region("out", 16)),
    "output_at_an_offset": _add_one(None, _region("pair", 64, 128)),
    "output_offset_beyond_the_region": _add_one(None, _region("pair", 64, 256)),
    "output_without_byte_size": _add_one(None, {"shared_memory_region": "out"}),
    "output_byte_size_a_string": _add_one(None, _region("out", "64")),
    "output_region_not_a_string": _add_one(None, _region(1, 64)),  # type: ignore[arg-type]
    "output_unknown_region": _add_one(None, _region("nope", 64)),
    "output_with_binary_data_output": _add_one(
        None, _region("out", 64), parameters={"binary_data_output": True}),
    "input_unknown_region": _add_one(_region("nope", 64)),
    "input_offset_beyond_the_region": _add_one(_region("in", 64, 64)),
    "input_offset_plus_size_beyond": _add_one(_region("in", 64, 4)),
    "input_size_not_the_shapes": _add_one(_region("in", 32)),
    "input_without_byte_size": _add_one({"shared_memory_region": "in"}),
    "input_offset_without_byte_size": _add_one(
        {"shared_memory_region": "in", "shared_memory_offset": 0}),
    "input_byte_size_a_string": _add_one(_region("in", "64")),
    "input_region_not_a_string": _add_one(_region(3, 64)),  # type: ignore[arg-type]
    "input_offset_negative": _add_one(_region("in", 64, -1)),
    "bytes_input_in_region": _echo(_region("strs", len(STRINGS))),
    "bytes_input_byte_size_not_the_elements": _echo(_region("strs", 64)),
    "bytes_output_in_region": _echo(_region("strs", len(STRINGS)), _region("strout", 64)),
    "bytes_output_region_exactly_its_size": _echo(
        _region("strs", len(STRINGS)), _region("strout", len(STRINGS))),
    "bytes_output_region_too_small": _echo(_region("strs", len(STRINGS)), _region("strout", 8)),
    "two_inputs_and_two_outputs_in_one_region": _pair(
        _region("pair", 16, 80), _region("pair", 16, 64), True),
    "region_output_beside_json_output": _pair({}, _region("pair", 16, 64), False),
}  # fmt: skip
#: regions whose bytes are compared after each infer case (region -> bytes)
WRITTEN = {"out": 64, "small": 32, "strout": 64, "pair": 256}


@pytest.mark.parametrize("name", sorted(REGISTER_CASES))
def test_registry_requests_answer_as_triton(name: str, both: dict[str, Side]) -> None:
    method, path, body = REGISTER_CASES[name]
    answers = [_http(side, method, path, body) for side in both.values()]
    assert answers[1] == answers[0], name
    statuses = [_http(side, "GET", "/v2/systemsharedmemory/status", None) for side in both.values()]
    assert statuses[1] == statuses[0], f"{name}: the regions afterwards"


@pytest.mark.parametrize("name", sorted(INFER_CASES))
def test_infer_through_regions_answers_as_triton(name: str, both: dict[str, Side]) -> None:
    method, path, body = INFER_CASES[name]
    answers = [_http(side, method, path, body) for side in both.values()]
    assert answers[1] == answers[0], name
    written = [{r: side.contents(r, size) for r, size in WRITTEN.items()} for side in both.values()]
    assert written[1] == written[0], f"{name}: the bytes written into the regions"


def test_binary_and_region_tensors_in_one_request(both: dict[str, Side]) -> None:
    head = {
        "inputs": [
            {"name": "IN_FP32", "datatype": "FP32", "shape": [1, 4],
             "parameters": _region("pair", 16)},
            {"name": "IN_INT32", "datatype": "INT32", "shape": [1, 4],
             "parameters": {"binary_data_size": 16}},
        ],
        "outputs": [{"name": "OUT_INT32", "parameters": _region("pair", 16, 80)},
                    {"name": "OUT_FP32", "parameters": {"binary_data": True}}],
    }  # fmt: skip
    header = json.dumps(head).encode()
    answers = []
    for side in both.values():
        reply = requests.post(
            f"{side.http}/v2/models/identity_all/infer",
            data=header + np.arange(4, dtype=np.int32).tobytes(),
            headers={"Inference-Header-Content-Length": str(len(header))},
            timeout=60,
        )
        length = reply.headers["inference-header-content-length"]
        answers.append((reply.status_code, length, reply.content, side.contents("pair", 256)))
    assert answers[1] == answers[0]


def test_unregister_one_then_all(both: dict[str, Side]) -> None:
    steps = [
        ("POST", "/v2/systemsharedmemory/region/out/unregister", None),
        ("GET", "/v2/systemsharedmemory/status", None),
        ("GET", "/v2/systemsharedmemory/region/out/status", None),
        ("POST", "/v2/systemsharedmemory/unregister", None),
        ("GET", "/v2/systemsharedmemory/status", None),
    ]
    answers = [[_http(side, *step) for step in steps] for side in both.values()]
    assert answers[1] == answers[0]
    assert answers[0][-1][::2] == (200, "[]")


# -- tritonclient, unchanged, over both protocols --------------------------------------------------
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tritonclient_round_trip(protocol: str, sides: dict[str, Side]) -> None:
    """What Triton's ``simple_*_shm_client.py`` examples do: register, check the status,
    infer with the input and the output in regions, unregister."""
    results = []
    for side in sides.values():
        results.append(_client_round_trip(side, protocol))
    assert results[1] == results[0]
    status, output = results[0][0], results[0][1]
    assert status == {"in": 64, "out": 64}
    np.testing.assert_array_equal(output, np.arange(16, dtype=np.float32) + 3)


def _client_round_trip(side: Side, protocol: str) -> tuple[Any, ...]:
    module: Any = httpclient if protocol == "http" else grpcclient
    client = module.InferenceServerClient(side.http.removeprefix("http://") if protocol == "http"
                                          else side.grpc)  # fmt: skip
    shm.set_shared_memory_region(side.handles["in"], [np.arange(16, dtype=np.float32) + 2])
    client.register_system_shared_memory("in", key(side.name, "in"), 64)
    client.register_system_shared_memory("out", key(side.name, "out"), 64)
    try:
        status = client.get_system_shared_memory_status()
        if protocol == "grpc":
            sizes = {name: int(region.byte_size) for name, region in status.regions.items()}
        else:
            sizes = {region["name"]: int(region["byte_size"]) for region in status}
        tensor = module.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_shared_memory("in", 64)
        output = module.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("out", 64)
        result = client.infer("add_one", [tensor], outputs=[output])
        answer = result.get_output("OUTPUT0")
        described = json_format.MessageToDict(answer) if protocol == "grpc" else answer
        written = shm.get_contents_as_numpy(side.handles["out"], np.float32, [16]).tolist()
        # the output names its datatype and shape, and carries no data
        assert "data" not in described and "parameters" not in described
        return sizes, written, described["datatype"], [int(dim) for dim in described["shape"]]
    finally:
        client.unregister_system_shared_memory()


# -- gRPC ----------------------------------------------------------------------------------------
def _parameters(**values: Any) -> dict[str, Any]:
    params = {}
    for name, value in values.items():
        if isinstance(value, bool):
            params[name] = P(bool_param=value)
        elif isinstance(value, str):
            params[name] = P(string_param=value)
        else:
            params[name] = P(int64_param=value)
    return params


def _grpc_add_one(
    input_region: dict[str, Any] | None = None,
    output_region: dict[str, Any] | None = None,
    **fields: Any,
) -> pb.ModelInferRequest:
    inputs = {"shared_memory_region": "in", "shared_memory_byte_size": 64}
    message = pb.ModelInferRequest(model_name="add_one", **fields)
    tensor = message.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    for name, value in _parameters(**(inputs if input_region is None else input_region)).items():
        tensor.parameters[name].CopyFrom(value)
    if output_region is not None:
        output = message.outputs.add(name="OUTPUT0")
        for name, value in _parameters(**output_region).items():
            output.parameters[name].CopyFrom(value)
    return message


def _g(region: str, size: int, offset: int | None = None, **more: Any) -> dict[str, Any]:
    return _region(region, size, offset, **more)


GRPC_CASES: dict[str, tuple[str, Any]] = {
    "status_all": ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest()),
    "status_one": ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name="in")),
    "status_unknown": ("SystemSharedMemoryStatus",
                       pb.SystemSharedMemoryStatusRequest(name="nope")),
    "register_duplicate": ("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(
        name="in", key=_sk("in"), byte_size=64)),
    "register_unknown_key": ("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(
        name="x", key=_sk("missing"), byte_size=64)),
    "register_beyond_the_object": ("SystemSharedMemoryRegister",
        pb.SystemSharedMemoryRegisterRequest(name="x", key=_sk("spare"), byte_size=257)),
    "register_offset_not_page_aligned": ("SystemSharedMemoryRegister",
        pb.SystemSharedMemoryRegisterRequest(name="x", key=_sk("big"), offset=8, byte_size=8)),
    "register_zero_byte_size": ("SystemSharedMemoryRegister",
        pb.SystemSharedMemoryRegisterRequest(name="x", key=_sk("spare"))),
    "unregister_unknown": ("SystemSharedMemoryUnregister",
                           pb.SystemSharedMemoryUnregisterRequest(name="nope")),
    "cuda_status_all": ("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest()),
    "cuda_status_of_a_system_region": ("CudaSharedMemoryStatus",
                                       pb.CudaSharedMemoryStatusRequest(name="in")),
    "cuda_status_unknown": ("CudaSharedMemoryStatus",
                            pb.CudaSharedMemoryStatusRequest(name="nope")),
    "cuda_unregister_of_a_system_region": ("CudaSharedMemoryUnregister",
                                           pb.CudaSharedMemoryUnregisterRequest(name="in")),
    "infer_input_in_region": ("ModelInfer", _grpc_add_one()),
    "infer_input_and_output_in_regions": ("ModelInfer", _grpc_add_one(None, _g("out", 64))),
    "infer_output_at_an_offset": ("ModelInfer", _grpc_add_one(None, _g("pair", 64, 64))),
    "infer_output_binary_data_is_ignored": ("ModelInfer", _grpc_add_one(
        None, _g("out", 64, binary_data=True))),
    "infer_output_region_too_small": ("ModelInfer", _grpc_add_one(None, _g("small", 32))),
    "infer_output_and_classification": ("ModelInfer", _grpc_add_one(
        None, _g("out", 64, classification=2))),
    "infer_output_unknown_region": ("ModelInfer", _grpc_add_one(None, _g("nope", 64))),
    "infer_output_negative_offset": ("ModelInfer", _grpc_add_one(None, _g("out", 64, -1))),
    "infer_output_without_byte_size": ("ModelInfer", _grpc_add_one(
        None, {"shared_memory_region": "out"})),
    "infer_input_unknown_region": ("ModelInfer", _grpc_add_one(_g("nope", 64))),
    "infer_input_offset_beyond": ("ModelInfer", _grpc_add_one(_g("in", 64, 64))),
    "infer_input_offset_plus_size_beyond": ("ModelInfer", _grpc_add_one(_g("in", 64, 8))),
    "infer_input_negative_offset": ("ModelInfer", _grpc_add_one(_g("in", 64, -8))),
    "infer_input_negative_byte_size": ("ModelInfer", _grpc_add_one(_g("in", -64))),
    "infer_input_size_not_the_shapes": ("ModelInfer", _grpc_add_one(_g("in", 32))),
    "infer_input_region_not_a_string": ("ModelInfer", _grpc_add_one(
        {"shared_memory_region": 1, "shared_memory_byte_size": 64})),
    "infer_input_and_contents": ("ModelInfer", _grpc_add_one()),  # contents added below
    "infer_input_region_and_raw_contents": ("ModelInfer", _grpc_add_one(
        raw_input_contents=[np.ones(16, np.float32).tobytes()])),
}  # fmt: skip
GRPC_CASES["infer_input_and_contents"][1].inputs[0].contents.fp32_contents.extend([1.0] * 16)


def _grpc(side: Side, rpc: str, request: Any) -> dict[str, Any]:
    message = type(request)()
    message.CopyFrom(request)
    if isinstance(message, pb.SystemSharedMemoryRegisterRequest):
        message.key = message.key.replace("_SIDE_", f"_{side.name}_")
    try:
        response = getattr(side.stub(), rpc)(message, timeout=60)
    except grpc.RpcError as error:
        return {"code": error.code().name, "details": side.normalize(error.details())}
    body = json_format.MessageToDict(response)
    return {"code": "OK", "body": json.loads(side.normalize(json.dumps(body)))}


@pytest.mark.parametrize("name", sorted(GRPC_CASES))
def test_grpc_requests_answer_as_triton(name: str, both: dict[str, Side]) -> None:
    rpc, request = GRPC_CASES[name]
    answers = [_grpc(side, rpc, request) for side in both.values()]
    assert answers[1] == answers[0], name
    written = [{r: side.contents(r, size) for r, size in WRITTEN.items()} for side in both.values()]
    assert written[1] == written[0], f"{name}: the bytes written into the regions"


@pytest.mark.parametrize("output_region", [_g("out", 64), _g("small", 32)])
def test_streamed_outputs_in_regions(output_region: dict[str, Any], both: dict[str, Side]) -> None:
    request = _grpc_add_one(None, output_region, id="r7")
    answers = []
    for side in both.values():
        responses = side.stub().ModelStreamInfer(iter([request]), timeout=60)
        answers.append([json_format.MessageToDict(response) for response in responses])
    assert answers[1] == answers[0]


# -- ours only -----------------------------------------------------------------------------------
def test_where_triton_2_51_misbehaves(both: dict[str, Side]) -> None:
    ours = both["ours"]
    shm.set_shared_memory_region(ours.handles["offset"], [np.full(16, 7, np.float32)], 4096)
    register = f"{ours.http}/v2/systemsharedmemory/region"
    body = {"key": key("ours", "offset"), "offset": 4096, "byte_size": 4096}
    assert requests.post(f"{register}/at4096/register", json=body, timeout=30).status_code == 200
    _, _, text = _http(ours, *_add_one(_region("at4096", 64)))
    assert json.loads(text)["outputs"][0]["data"] == [8.0] * 16  # the region's bytes, plus one
    for name in ("first", "second"):  # two regions of one object
        body = {"key": key("ours", "shared"), "byte_size": 64}
        assert requests.post(f"{register}/{name}/register", json=body, timeout=30).ok
    cuda = {"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64}
    status, _, text = _http(ours, "POST", "/v2/cudasharedmemory/region/c/register", cuda)
    assert (status, json.loads(text)) == (
        400,
        {"error": "failed to register CUDA shared memory region: 'c', GPUs not supported"},
    )


def test_metadata_advertises_system_shared_memory_and_sequence(embedded_server: Server) -> None:
    extensions = requests.get(f"{embedded_server.url}/v2", timeout=30).json()["extensions"]
    assert {"system_shared_memory", "sequence"} <= set(extensions)
    assert "cuda_shared_memory" not in extensions
