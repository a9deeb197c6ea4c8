"""``ModelInfer`` over gRPC: raw and typed tensors, BYTES, classification, parameters, errors,
compression and the message size limit, with ``tritonclient.grpc`` (sync and aio)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from tests.server.grpc.served import BUILT_SERVERS, GrpcServer, serve_grpc
from workbench.server.grpc import GrpcOptions

P = pb.InferParameter
Input = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor
ROW = np.arange(16, dtype=np.float32).reshape(1, 16)


@pytest.fixture(scope="module", params=BUILT_SERVERS)
def grpc_server(request: pytest.FixtureRequest) -> Iterator[GrpcServer]:
    yield from serve_grpc(implementation=request.param)


def _infer(server: GrpcServer, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    return server.stub().ModelInfer(request)


def _error(server: GrpcServer, request: pb.ModelInferRequest) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        _infer(server, request)
    error: Any = info.value
    return error.code(), error.details()


def _add_one(**fields: Any) -> pb.ModelInferRequest:
    base: dict[str, Any] = {
        "model_name": "add_one",
        "inputs": [Input(name="INPUT0", datatype="FP32", shape=[1, 16])],
        "raw_input_contents": [ROW.tobytes()],
    }
    base.update(fields)
    return pb.ModelInferRequest(**base)


def test_raw_tensors_with_the_sync_client(grpc_server: GrpcServer) -> None:
    data = np.arange(32, dtype=np.float32).reshape(2, 16)
    tensor = grpcclient.InferInput("INPUT0", [2, 16], "FP32")
    tensor.set_data_from_numpy(data)
    result = grpc_server.client().infer("add_one", [tensor], request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + 1)
    response = result.get_response()
    assert (response.id, response.model_name, response.model_version) == ("r1", "add_one", "1")


def test_the_aio_client() -> None:
    async def run(url: str) -> tuple[np.ndarray, bool]:
        client = aioclient.InferenceServerClient(url)
        try:
            tensor = aioclient.InferInput("INPUT0", [1, 16], "FP32")
            tensor.set_data_from_numpy(ROW)
            result = await client.infer("add_one", [tensor])
            ready = await client.is_model_ready("add_one")
            return result.as_numpy("OUTPUT0"), ready
        finally:
            await client.close()

    for server in serve_grpc():
        output, ready = asyncio.run(run(server.url))
        np.testing.assert_array_equal(output, ROW + 1)
        assert ready


def test_typed_contents(grpc_server: GrpcServer) -> None:
    contents = pb.InferTensorContents(fp32_contents=ROW.ravel().tolist())
    request = pb.ModelInferRequest(
        model_name="add_one",
        inputs=[Input(name="INPUT0", datatype="FP32", shape=[1, 16], contents=contents)],
    )
    response = _infer(grpc_server, request)
    out = np.frombuffer(response.raw_output_contents[0], dtype=np.float32)
    np.testing.assert_array_equal(out, ROW.ravel() + 1)
    assert list(response.outputs[0].shape) == [1, 16]


def test_typed_bytes_and_raw_bytes(grpc_server: GrpcServer) -> None:
    typed = pb.ModelInferRequest(
        model_name="strings",
        inputs=[
            Input(
                name="INPUT0",
                datatype="BYTES",
                shape=[2],
                contents=pb.InferTensorContents(bytes_contents=[b"ab", b"cde"]),
            )
        ],
    )
    response = _infer(grpc_server, typed)
    assert response.raw_output_contents[0] == b"\x02\x00\x00\x00AB\x03\x00\x00\x00CDE"
    tensor = grpcclient.InferInput("INPUT0", [2], "BYTES")
    tensor.set_data_from_numpy(np.array([b"x", b"yz"], dtype=np.object_))
    result = grpc_server.client().infer("strings", [tensor])
    assert result.as_numpy("OUTPUT0").tolist() == [b"X", b"YZ"]


@pytest.mark.parametrize(
    ("datatype", "field", "values", "expected"),
    [
        ("INT8", "int_contents", [1, -2, 300], b"\x01\xfe\x2c"),
        ("UINT16", "uint_contents", [1, 70000], b"\x01\x00\x70\x11"),
        ("BOOL", "bool_contents", [True, False], b"\x01\x00"),
        ("INT64", "int64_contents", [-1], (-1).to_bytes(8, "little", signed=True)),
    ],
)
def test_narrow_typed_integers_keep_their_low_bytes(
    grpc_server: GrpcServer, datatype: str, field: str, values: list[Any], expected: bytes
) -> None:
    # The fake "echo_bytes" model is BYTES-only; check the decoded tensor through the codec's
    # contract instead: the request reaches the core with Triton's byte layout.
    from workbench.server.grpc.request_codec import decode_request

    contents = pb.InferTensorContents(**{field: values})
    message = pb.ModelInferRequest(
        model_name="any",
        inputs=[Input(name="X", datatype=datatype, shape=[len(values)], contents=contents)],
    )
    request, _ = decode_request(message, "")
    assert request.inputs["X"].array.tobytes() == expected


@pytest.mark.parametrize(
    ("request_fields", "code", "message"),
    [
        (
            {
                "inputs": [
                    Input(
                        name="INPUT0",
                        datatype="FP32",
                        shape=[1, 16],
                        contents=pb.InferTensorContents(fp32_contents=[0.0] * 16),
                    )
                ]
            },
            "INVALID_ARGUMENT",
            "contents field must not be specified when using raw_input_contents for 'INPUT0' "
            "for model 'add_one'",
        ),
        (
            {"raw_input_contents": []},
            "INVALID_ARGUMENT",
            "unable to find data for input tensor 'INPUT0' for model 'add_one' in request.",
        ),
        (
            {"raw_input_contents": [ROW.tobytes()[:-4]]},
            "INVALID_ARGUMENT",
            "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model "
            "'add_one'. Expected 64, got 60",
        ),
        (
            {"model_name": "nope"},
            "NOT_FOUND",
            "Request for unknown model: 'nope' is not found",
        ),
        (
            {"model_version": "q"},
            "INVALID_ARGUMENT",
            "failed to get model version from specified version string 'q' (details: stol), "
            "version should be an integral value > 0",
        ),
        (
            {
                "model_name": "decoupled",
                "inputs": [Input(name="INPUT0", datatype="FP32", shape=[1])],
            },
            "UNIMPLEMENTED",
            "ModelInfer RPC doesn't support models with decoupled transaction policy",
        ),
        (
            {"inputs": [Input(name="INPUT0", datatype="FOO", shape=[1, 16])]},
            "INVALID_ARGUMENT",
            "[request id: <id_unknown>] inference input 'INPUT0' data-type is '<invalid>', but "
            "model 'add_one' expects 'FP32'",
        ),
        (
            {
                "inputs": [Input(name="INPUT0", datatype="FP32", shape=[1, 16])] * 2,
                "raw_input_contents": [ROW.tobytes()] * 2,
            },
            "INVALID_ARGUMENT",
            "[request id: <id_unknown>] input 'INPUT0' already exists in request",
        ),
        (
            {"outputs": [Output(name="NOPE")]},
            "INVALID_ARGUMENT",
            "unexpected inference output 'NOPE' for model 'add_one'",
        ),
        (
            {
                "outputs": [
                    Output(name="OUTPUT0", parameters={"classification": P(bool_param=True)})
                ]
            },
            "INVALID_ARGUMENT",
            "invalid value type for 'classification' parameter, expected int64_param",
        ),
        (
            {"outputs": [Output(name="OUTPUT0", parameters={"classification": P(int64_param=0)})]},
            "INVALID_ARGUMENT",
            "invalid value for 'classification' parameter, expected >= 0",
        ),
        (
            {
                "outputs": [
                    Output(name="OUTPUT0", parameters={"shared_memory_region": P(string_param="r")})
                ]
            },
            "INVALID_ARGUMENT",
            "'shared_memory_byte_size' must be specified along with 'shared_memory_region' "
            "parameter for tensor 'OUTPUT0'",
        ),
        (
            {
                "outputs": [
                    Output(
                        name="OUTPUT0",
                        parameters={
                            "shared_memory_region": P(string_param="r"),
                            "shared_memory_byte_size": P(int64_param=64),
                        },
                    )
                ]
            },
            "NOT_FOUND",
            "Unable to find shared memory region: 'r'",
        ),
    ],
)
def test_request_errors(
    grpc_server: GrpcServer, request_fields: dict[str, Any], code: str, message: str
) -> None:
    assert _error(grpc_server, _add_one(**request_fields)) == (grpc.StatusCode[code], message)


def test_typed_contents_of_the_wrong_type(grpc_server: GrpcServer) -> None:
    def typed(**contents: Any) -> pb.ModelInferRequest:
        tensor = Input(
            name="INPUT0",
            datatype="FP32",
            shape=[1, 16],
            contents=pb.InferTensorContents(**contents),
        )
        return pb.ModelInferRequest(model_name="add_one", inputs=[tensor])

    assert _error(grpc_server, typed(int_contents=[1] * 16)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'add_one' of type "
        "'INT32', expected datatype 'FP32'",
    )
    assert _error(grpc_server, typed(fp32_contents=[1.0] * 16, fp64_contents=[1.0])) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'add_one', binary "
        "data was already supplied.",
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "sequence_id",
            P(bool_param=True),
            "invalid value type for 'sequence_id' parameter, expected int64_param or string_param.",
        ),
        (
            "sequence_start",
            P(int64_param=1),
            "invalid value type for 'sequence_start' parameter, expected bool_param.",
        ),
        ("priority", P(int64_param=-1), "invalid value for 'priority', expected value >= 0."),
        (
            "timeout",
            P(uint64_param=5),
            "invalid value type for 'timeout' parameter, expected int64_param.",
        ),
        (
            "triton_x",
            P(bool_param=True),
            "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
            "following keys starting with 'triton_' are allowed: "
            "triton_enable_empty_final_response",
        ),
        (
            "custom",
            P(uint64_param=1),
            "invalid value type for 'custom' parameter, expected int64_param, bool_param, or "
            "string_param.",
        ),
    ],
)
def test_parameter_errors(grpc_server: GrpcServer, key: str, value: Any, message: str) -> None:
    request = _add_one(parameters={key: value})
    assert _error(grpc_server, request) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_parameters_reach_the_core_as_over_http() -> None:
    from workbench.server.grpc.request_codec import decode_request

    message = _add_one(
        parameters={
            "sequence_id": P(string_param="abc"),
            "sequence_start": P(bool_param=True),
            "priority": P(uint64_param=2),
            "timeout": P(int64_param=100),
            "binary_data_output": P(bool_param=True),  # HTTP-only: a plain model parameter here
            "custom": P(double_param=1.5),
            "triton_enable_empty_final_response": P(bool_param=True),
        }
    )
    request, params = decode_request(message, "")
    assert request.parameters == {
        "sequence_id": "abc",
        "sequence_start": True,
        "priority": 2,
        "timeout": 100,
        "binary_data_output": True,
        "custom": 1.5,
    }
    assert params.empty_final_response


def test_classification_with_labels(grpc_server: GrpcServer) -> None:
    scores = np.array([[0.1, 0.7, 0.2, 0.0]], dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(scores)
    output = grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)
    result = grpc_server.client().infer("scores", [tensor], outputs=[output])
    assert result.as_numpy("OUTPUT0").tolist() == [[b"0.700000:1:dog", b"0.200000:2:bird"]]
    assert result.get_output("OUTPUT0").datatype == "BYTES"


def test_requested_outputs_only(grpc_server: GrpcServer) -> None:
    a = grpcclient.InferInput("A", [2], "INT32")
    a.set_data_from_numpy(np.array([1, 2], dtype=np.int32))
    b = grpcclient.InferInput("B", [2], "INT32")
    b.set_data_from_numpy(np.array([3, 4], dtype=np.int32))
    out = [grpcclient.InferRequestedOutput("SUM")]
    result = grpc_server.client().infer("two_in", [a, b], outputs=out)
    assert result.as_numpy("SUM").tolist() == [4, 6]


@pytest.mark.parametrize("level", ["low", "medium", "high"])
def test_compressed_responses_decode_unchanged(level: str) -> None:
    for server in serve_grpc(GrpcOptions(port=0, address="127.0.0.1", infer_compression=level)):
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(ROW)
        result = server.client().infer("add_one", [tensor])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), ROW + 1)


def test_message_size_limit() -> None:
    options = GrpcOptions(port=0, address="127.0.0.1", max_message_bytes=4096)
    for server in serve_grpc(options):
        request = pb.ModelInferRequest(
            model_name="strings",
            inputs=[Input(name="INPUT0", datatype="BYTES", shape=[2000])],
            raw_input_contents=[b"\x01\x00\x00\x00x" * 2000],
        )
        code, _ = _error(server, request)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED  # refused by grpc before decoding
        assert server.client().is_server_live()


def test_a_failing_core_gives_the_category_status(grpc_server: GrpcServer) -> None:
    with pytest.raises(InferenceServerException) as info:
        tensor = grpcclient.InferInput("INPUT0", [1, 15], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 15), dtype=np.float32))
        grpc_server.client().infer("add_one", [tensor], request_id="bad")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unexpected shape for input 'INPUT0'" in info.value.message()
    assert grpc_server.client().is_server_live()


def test_a_response_over_the_message_limit_is_an_invalid_argument() -> None:
    from workbench._types import Tensor
    from workbench.core.request import InferResponse
    from workbench.errors import InvalidArgumentError
    from workbench.server.grpc.response_codec import encode_response

    big = Tensor("OUT", "UINT8", np.zeros(2 << 20, dtype=np.uint8))
    response = InferResponse("m", "1", outputs=[big])
    assert len(encode_response(response).raw_output_contents[0]) == 2 << 20
    with pytest.raises(InvalidArgumentError, match=r"which exceeds gRPC's byte size limit 1000\."):
        encode_response(response, limit=1000)
