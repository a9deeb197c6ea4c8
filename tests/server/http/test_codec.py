"""The HTTP codec: JSON and binary requests, raw binary, responses, classification."""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import serialize_bf16_tensor, serialize_byte_tensor

from tests.server.fake_core import FakeCore
from workbench._types import Tensor
from workbench.config import to_json_dict as config_to_json
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InternalError, InvalidArgumentError, NotFoundError, UnsupportedError
from workbench.server.classification import classify
from workbench.server.http import compression
from workbench.server.http.raw_request import decode_raw_request
from workbench.server.http.request_codec import decode_infer_request, parse_header_length
from workbench.server.http.response_codec import encode_infer_response

NUMERIC = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
NUMERIC += ["FP32", "FP64"]
GOLDEN = Path(__file__).parents[2] / "assets" / "conformance_golden"


def body_of(header: dict[str, Any], *chunks: bytes) -> tuple[bytes, int | None]:
    head = json.dumps(header).encode()
    return head + b"".join(chunks), (len(head) if chunks else None)


def decode(header: dict[str, Any], *chunks: bytes) -> tuple[InferRequest, bool]:
    body, length = body_of(header, *chunks)
    return decode_infer_request(body, length, "m")


def sample(datatype: str) -> np.ndarray:
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if datatype == "BYTES":
        return np.array([[b"a", b"", "é".encode()], [b"\x00\xff", b"xyz", b"q"]], dtype=object)
    return np.arange(6, dtype=WIRE_TO_NUMPY[datatype]).reshape(2, 3)


# -- JSON requests -------------------------------------------------------------------------------
@pytest.mark.parametrize("datatype", NUMERIC)
def test_json_input_every_numeric_type(datatype: str) -> None:
    expected = sample(datatype)
    spec = {"name": "x", "datatype": datatype, "shape": [2, 3], "data": expected.tolist()}
    request, binary = decode({"inputs": [spec]})
    tensor = request.inputs["x"]
    assert tensor.datatype == datatype and not binary
    assert tensor.array.dtype == WIRE_TO_NUMPY[datatype]
    np.testing.assert_array_equal(tensor.array, expected)


def test_json_flat_and_nested_data_agree() -> None:
    flat = {"name": "x", "datatype": "INT32", "shape": [2, 2], "data": [1, 2, 3, 4]}
    nested = {**flat, "data": [[1, 2], [3, 4]]}
    a, _ = decode({"inputs": [flat]})
    b, _ = decode({"inputs": [nested]})
    np.testing.assert_array_equal(a.inputs["x"].array, b.inputs["x"].array)


def test_json_bytes_are_utf8_encoded() -> None:
    spec = {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["hé", ""]}
    request, _ = decode({"inputs": [spec]})
    assert request.inputs["s"].array.tolist() == ["hé".encode(), b""]


def test_json_request_fields() -> None:
    header = {
        "id": "r1",
        "parameters": {"binary_data_output": True, "sequence_id": 7, "custom": "v"},
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.5]}],
        "outputs": [{"name": "y", "parameters": {"binary_data": False, "classification": 2}}],
    }
    request, binary = decode(header)
    assert request.id == "r1" and binary
    assert request.parameters == {"sequence_id": 7, "custom": "v"}
    assert request.requested_outputs == ["y"]
    assert request.output_parameters == {"y": {"binary_data": False, "classification": 2}}


def test_json_empty_tensor() -> None:
    request, _ = decode(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [0, 4], "data": []}]}
    )
    assert request.inputs["x"].array.shape == (0, 4)


JSON_ERRORS = [
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [3], "data": [1, 2]}]}, InternalError,
     "Shape does not match"),
    ({"inputs": [{"name": "x", "datatype": "INT32", "shape": [2], "data": [1, 2.5]}]},
     InternalError, "non-signed-integer"),
    ({"inputs": [{"name": "x", "datatype": "UINT8", "shape": [1], "data": [-1]}]},
     InternalError, "non-unsigned-integer"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": ["1"]}]},
     InternalError, "non-number"),
    ({"inputs": [{"name": "x", "datatype": "BOOL", "shape": [1], "data": [1]}]},
     InternalError, "non-boolean"),
    ({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": [1]}]},
     InternalError, "non-string"),
    ({"inputs": [{"name": "x", "datatype": "FP16", "shape": [1], "data": [1.0]}]},
     InvalidArgumentError, "receiving FP16 data via JSON is not supported"),
    ({"inputs": [{"name": "x", "datatype": "F32", "shape": [1], "data": [1.0]}]},
     InvalidArgumentError, "invalid datatype for input x"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1], "data": [1.0]}]},
     InternalError, "Unable to parse 'shape'"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]}, InvalidArgumentError,
     "But no field is set"),
    ({"inputs": [{"datatype": "FP32", "shape": [1], "data": [1]}]}, InternalError,
     "non-existing object member 'name'"),
    ({"inputs": {}}, InternalError, "Unable to parse 'inputs'"),
    ({}, InternalError, "non-existing object member 'inputs'"),
    ({"id": 5, "inputs": []}, InternalError, "Unable to parse 'id'"),
    ({"inputs": [], "parameters": {"triton_x": 1}}, InvalidArgumentError, "reserved for Triton"),
    ({"inputs": [], "parameters": {"p": [1]}}, InvalidArgumentError, "has invalid type"),
    ({"inputs": [], "parameters": {"priority": -1}}, InternalError, "Unable to parse 'priority'"),
    ({"inputs": [], "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]},
     InternalError, "Unable to parse 'binary_data'"),
    ({"inputs": [], "outputs": [{"name": "y", "parameters": {"classification": -2}}]},
     InternalError, "Unable to set 'classification'"),
    ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1],
                  "parameters": {"shared_memory_region": "r"}}]},
     NotFoundError, "Unable to find shared memory region: 'r'"),
]  # fmt: skip


@pytest.mark.parametrize(("header", "error", "text"), JSON_ERRORS)
def test_json_errors(header: dict[str, Any], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=text):
        decode(header)


def test_malformed_json_is_reported_like_triton() -> None:
    with pytest.raises(InternalError, match=r"failed to parse the request JSON buffer: .* at 1"):
        decode_infer_request(b"{]", None, "m")
    with pytest.raises(InternalError, match="failed to parse"):
        decode_infer_request(b"\xff\xfe", None, "m")


# -- binary requests -----------------------------------------------------------------------------
def binary_input(name: str, datatype: str, array: np.ndarray) -> tuple[dict[str, Any], bytes]:
    if datatype == "BYTES":
        data = serialize_byte_tensor(array).item()
    elif datatype == "BF16":
        data = serialize_bf16_tensor(array).item()
    else:
        data = array.tobytes()
    params = {"binary_data_size": len(data)}
    spec = {"name": name, "datatype": datatype, "shape": list(array.shape), "parameters": params}
    return spec, data


@pytest.mark.parametrize("datatype", [*NUMERIC, "FP16", "BYTES"])
def test_binary_input_every_type(datatype: str) -> None:
    expected = sample(datatype)
    spec, data = binary_input("x", datatype, expected)
    request, _ = decode({"inputs": [spec]}, data)
    np.testing.assert_array_equal(request.inputs["x"].array, expected)
    assert request.inputs["x"].array.shape == (2, 3)


def test_binary_bf16_is_raw_uint16_bits() -> None:
    values = np.array([1.0, -2.5, 3.0], dtype=np.float32)
    spec, data = binary_input("x", "BF16", values)
    request, _ = decode({"inputs": [spec]}, data)
    bits = request.inputs["x"].array
    assert bits.dtype == np.uint16
    restored = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(restored, values)


def test_binary_inputs_are_views_of_the_body() -> None:
    a_spec, a = binary_input("a", "FP32", np.arange(4, dtype=np.float32))
    b_spec, b = binary_input("b", "INT64", np.arange(3, dtype=np.int64))
    body, length = body_of({"inputs": [a_spec, b_spec]}, a, b)
    buffer = bytearray(body)
    request, _ = decode_infer_request(buffer, length, "m")
    assert np.shares_memory(request.inputs["b"].array, np.frombuffer(buffer, np.uint8))
    np.testing.assert_array_equal(request.inputs["b"].array, np.arange(3))


def test_binary_and_json_inputs_mix() -> None:
    spec, data = binary_input("a", "INT32", np.array([1, 2], dtype=np.int32))
    json_spec = {"name": "b", "datatype": "INT32", "shape": [2], "data": [3, 4]}
    request, _ = decode({"inputs": [json_spec, spec]}, data)
    assert request.inputs["a"].array.tolist() == [1, 2]
    assert request.inputs["b"].array.tolist() == [3, 4]


def test_binary_size_errors() -> None:
    spec, data = binary_input("x", "FP32", np.zeros(16, dtype=np.float32))
    with pytest.raises(InvalidArgumentError, match="expecting 4 additional bytes for model 'm'"):
        decode({"inputs": [spec]}, data[:-4])
    with pytest.raises(InvalidArgumentError, match="unexpected additional input data"):
        decode({"inputs": [spec]}, data + b"xx")
    spec["shape"] = [15]
    assert deferred_error(decode({"inputs": [spec]}, data)[0], "x") == (
        "[request id: <id_unknown>] input byte size mismatch for input 'x' for model 'm'. "
        "Expected 60, got 64"
    )


def deferred_error(request: InferRequest, name: str) -> str:
    """What the core will say about an input the codec could not make an array of."""
    assert request.deferred_inputs is not None and request.inputs[name].array.size == 0
    return str(request.deferred_inputs[name].error)


def test_binary_bytes_framing_errors() -> None:
    good = serialize_byte_tensor(np.array([b"ab", b"c"], dtype=object)).item()
    params = {"binary_data_size": len(good)}
    spec = {"name": "s", "datatype": "BYTES", "shape": [3], "parameters": params}
    assert "expected 3 string elements for" in deferred_error(
        decode({"inputs": [spec]}, good)[0], "s"
    )
    spec["shape"] = [1]
    error = deferred_error(decode({"inputs": [spec]}, good)[0], "s")
    assert "unexpected number of string elements 2" in error
    spec["shape"], spec["parameters"] = [2], {"binary_data_size": len(good) + 2}
    error = deferred_error(decode({"inputs": [spec]}, good + b"\x01\x00")[0], "s")
    assert "incomplete string length indicator" in error
    # Triton's core counts a cut element as one; its backend refuses it, without a request id
    truncated = struct.pack("<I", 10) + b"abc"
    spec["shape"], spec["parameters"] = [1], {"binary_data_size": len(truncated)}
    assert deferred_error(decode({"inputs": [spec]}, truncated)[0], "s") == (
        "incomplete string data for inference input 's', expecting string of length 10 but "
        "only 3 bytes available"
    )
    spec["shape"] = [2]
    error = deferred_error(decode({"inputs": [spec]}, truncated)[0], "s")
    assert "expected 2 string elements for inference input 's' for model 'm', got 1" in error


def test_header_length_header() -> None:
    assert parse_header_length(None, 10) is None
    assert parse_header_length(b"4", 10) == 4
    with pytest.raises(InvalidArgumentError, match="should be in range"):
        parse_header_length(b"11", 10)
    # C's atoi, as Triton reads it: no number is 0 (the raw layout), digits end at a non-digit
    assert parse_header_length(b"x", 10) == 0
    assert parse_header_length(b" +4abc", 10) == 4
    with pytest.raises(InvalidArgumentError, match="should be in range"):
        parse_header_length(b"-1", 10)


# -- raw binary ----------------------------------------------------------------------------------
def test_raw_request_batching_model_gets_batch_one() -> None:
    config = FakeCore().configs["add_one"]
    data = np.arange(16, dtype=np.float32)
    request = decode_raw_request(data.tobytes(), "add_one", "", config)
    np.testing.assert_array_equal(request.inputs["INPUT0"].array, data.reshape(1, 16))
    with pytest.raises(InvalidArgumentError, match="Expected 64, got 60"):
        decode_raw_request(data.tobytes()[:60], "add_one", "", config)


def test_raw_request_deduces_the_variable_dimension() -> None:
    config = model_config_pb2.ModelConfig(max_batch_size=2)
    config.input.add(name="INPUT0", data_type=model_config_pb2.TYPE_INT32, dims=[-1])
    request = decode_raw_request(np.arange(5, dtype=np.int32).tobytes(), "m", "", config)
    assert request.inputs["INPUT0"].array.tolist() == [[0, 1, 2, 3, 4]]


def test_raw_request_bytes_and_errors() -> None:
    core = FakeCore()
    request = decode_raw_request(b"hello", "echo_bytes", "", core.configs["echo_bytes"])
    assert request.inputs["INPUT0"].array.tolist() == [b"hello"]
    with pytest.raises(InvalidArgumentError, match="model must have input shape \\[1\\]"):
        decode_raw_request(b"hello", "strings", "", core.configs["strings"])
    with pytest.raises(InvalidArgumentError, match="Raw request must only have 1 input"):
        decode_raw_request(b"12345678", "two_in", "", core.configs["two_in"])


# -- responses -----------------------------------------------------------------------------------
def response_of(*tensors: Tensor) -> InferResponse:
    return InferResponse("m", "1", "id7", list(tensors))


def test_json_response() -> None:
    out = Tensor("y", "FP32", np.array([[1.5, 2.0]], dtype=np.float32))
    text = Tensor("s", "BYTES", np.array([b"hi", "é".encode()], dtype=object))
    flag = Tensor("b", "BOOL", np.array([True, False]))
    body, length = encode_infer_response(response_of(out, text, flag), InferRequest("m"), False)
    assert length is None
    assert json.loads(body) == {
        "id": "id7",
        "model_name": "m",
        "model_version": "1",
        "outputs": [
            {"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [1.5, 2.0]},
            {"name": "s", "datatype": "BYTES", "shape": [2], "data": ["hi", "é"]},
            {"name": "b", "datatype": "BOOL", "shape": [2], "data": [True, False]},
        ],
    }


def test_binary_response_and_per_output_choice() -> None:
    values = np.arange(4, dtype=np.float32)
    texts = np.array([b"ab", b"c"], dtype=object)
    request = InferRequest("m", output_parameters={"y": {"binary_data": True}, "s": {}})
    response = response_of(Tensor("y", "FP32", values), Tensor("s", "BYTES", texts))
    body, length = encode_infer_response(response, request, binary_default=True)
    assert length is not None
    header = json.loads(body[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 16}
    assert header["outputs"][1]["data"] == ["ab", "c"]  # listed without binary_data: JSON
    assert body[length:] == values.tobytes()


def test_binary_default_applies_to_unlisted_outputs() -> None:
    texts = np.array([b"ab", b"c"], dtype=object)
    body, length = encode_infer_response(
        response_of(Tensor("s", "BYTES", texts)), InferRequest("m"), True
    )
    assert length is not None
    assert body[length:] == serialize_byte_tensor(texts).item()


def test_fp16_output_needs_binary() -> None:
    half = Tensor("h", "FP16", np.ones(2, dtype=np.float16))
    with pytest.raises(InvalidArgumentError, match="sending FP16 data via JSON"):
        encode_infer_response(response_of(half), InferRequest("m"), False)
    body, length = encode_infer_response(response_of(half), InferRequest("m"), True)
    assert length is not None and body[length:] == np.ones(2, dtype=np.float16).tobytes()


def test_empty_binary_outputs_stay_json() -> None:
    empty = Tensor("y", "FP32", np.zeros((0,), dtype=np.float32))
    body, length = encode_infer_response(response_of(empty), InferRequest("m"), True)
    assert length is None
    assert json.loads(body)["outputs"][0]["parameters"] == {"binary_data_size": 0}


# -- classification ------------------------------------------------------------------------------
def test_classification_top_k_with_labels() -> None:
    scores = Tensor("y", "FP32", np.array([0.1, 0.7, 0.2, 0.7], dtype=np.float32))
    result = classify(scores, 3, ["a", "b", "c", "d"])
    assert result.datatype == "BYTES" and result.shape == (3,)
    assert result.array.tolist() == [b"0.700000:1:b", b"0.700000:3:d", b"0.200000:2:c"]


def test_classification_batched_ints_without_labels() -> None:
    scores = Tensor("y", "UINT8", np.array([[1, 9, 5], [7, 0, 3]], dtype=np.uint8))
    result = classify(scores, 5, None, batched=True)
    assert result.shape == (2, 3)
    assert result.array[1].tolist() == [b"7:0", b"3:2", b"0:1"]


def test_classification_unsupported_type() -> None:
    with pytest.raises(InvalidArgumentError, match="unsupported type 'FP16'"):
        classify(Tensor("y", "FP16", np.ones(2, dtype=np.float16)), 1)


# -- compression, config JSON --------------------------------------------------------------------
def test_request_decompression() -> None:
    data = b"x" * 1000
    assert compression.decompress(gzip.compress(data), b"gzip", 2000) == data
    assert compression.decompress(zlib.compress(data), b"deflate", 2000) == data
    assert compression.decompress(data, None, 2000) is data
    with pytest.raises(UnsupportedError, match="Unsupported compression type"):
        compression.decompress(data, b"br", 2000)
    with pytest.raises(InvalidArgumentError, match="exceeds the maximum allowed value of 100"):
        compression.decompress(gzip.compress(data), b"gzip", 100)
    with pytest.raises(InvalidArgumentError, match="failed to decompress"):
        compression.decompress(b"not gzip", b"gzip", 100)


def test_response_encoding_choice() -> None:
    assert compression.response_encoding(None) == "identity"
    assert compression.response_encoding(b"gzip") == "gzip"
    assert compression.response_encoding(b"gzip;q=0.5, deflate;q=0.8, br") == "deflate"
    assert compression.response_encoding(b"br, zstd") == "identity"
    assert gzip.decompress(compression.compress(b"abc", "gzip")) == b"abc"


def test_config_json_writes_int64_as_numbers() -> None:
    config = FakeCore().configs["add_one"]
    config.dynamic_batching.max_queue_delay_microseconds = 100
    data = config_to_json(config)
    assert data["input"][0]["dims"] == [16]
    assert data["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert data["max_batch_size"] == 8 and data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["output"][0]["label_filename"] == ""  # defaults are printed, as Triton does


@pytest.mark.parametrize("model", ["add_one", "echo_bytes", "identity_all", "fails_on_negative"])
def test_config_json_matches_triton_golden(model: str) -> None:
    golden = GOLDEN / f"model_config_{model}.json"
    if not golden.exists():
        pytest.skip("no golden capture")
    body = json.loads(golden.read_text())["response"]["body"]
    config = json_format.ParseDict(body, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)
    assert config_to_json(config) == body
    assert list(config_to_json(config)) == list(body)
