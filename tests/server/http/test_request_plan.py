"""The infer hot path's shortcuts give what the full codec gives, byte for byte.

``request_plan`` (a binary request header decoded once), ``encode_binary_response`` (a binary
response's JSON header written once) and the connection's remembered paths and routes must
be invisible: same requests, same bodies, same errors as the general code.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import httptools
import numpy as np
import pytest

from workbench._types import Tensor
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError, WorkbenchError
from workbench.server.http import request_codec
from workbench.server.http.app import _MODEL, model_route
from workbench.server.http.connection import request_path
from workbench.server.http.request_plan import make_plan
from workbench.server.http.response_codec import encode_binary_response, encode_infer_response
from workbench.server.tensor_bytes import tensor_buffer


def binary_input(name: str, array: np.ndarray, datatype: str) -> dict[str, Any]:
    spec = {"name": name, "datatype": datatype, "shape": list(array.shape)}
    return {**spec, "parameters": {"binary_data_size": array.nbytes}}


def body_of(header: dict[str, Any], *arrays: np.ndarray) -> tuple[bytes, int]:
    head = json.dumps(header).encode()
    return head + b"".join(a.tobytes() for a in arrays), len(head)


def full_decode(body: bytes, length: int) -> tuple[InferRequest, bool]:
    """The general decoder alone (no plan)."""
    document = request_codec._json.loads(body[:length])
    view = memoryview(body)
    return request_codec._decode_document(document, view, length, "m", "2")


def summary(request: InferRequest) -> dict[str, Any]:
    inputs = {
        name: (t.name, t.datatype, t.array.dtype, t.array.shape, t.array.tobytes(), t.parameters)
        for name, t in request.inputs.items()
    }
    fields = (request.model_name, request.model_version, request.id, request.parameters)
    return {
        "fields": fields,
        "inputs": inputs,
        "outputs": (request.requested_outputs, request.output_parameters),
    }


FP32 = np.arange(16, dtype=np.float32).reshape(1, 16)
INT64 = np.arange(6, dtype=np.int64).reshape(2, 3)
BOOL = np.array([True, False, True])
HALF = np.arange(4, dtype=np.float16)
EMPTY = np.zeros((0, 4), dtype=np.int32)

USUAL: dict[str, tuple[dict[str, Any], tuple[np.ndarray, ...]]] = {
    "perf_analyzer": (
        {
            "id": "",
            "inputs": [binary_input("INPUT0", FP32, "FP32")],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        },
        (FP32,),
    ),
    "several inputs, mixed outputs, id": (
        {
            "id": "r-1",
            "inputs": [
                binary_input("A", INT64, "INT64"),
                binary_input("B", BOOL, "BOOL"),
                binary_input("C", HALF, "FP16"),
                binary_input("D", HALF.view(np.uint16), "BF16"),
            ],
            "outputs": [
                {"name": "X", "parameters": {"binary_data": False}},
                {"name": "Y"},
                {"name": "Z", "parameters": {}},
                {"name": "W", "parameters": {"binary_data": True}},
            ],
        },
        (INT64, BOOL, HALF, HALF.view(np.uint16)),
    ),
    "no outputs listed": ({"inputs": [binary_input("A", INT64, "INT64")]}, (INT64,)),
    "empty tensor": ({"inputs": [binary_input("E", EMPTY, "INT32")], "outputs": []}, (EMPTY,)),
}


def test_an_input_named_twice_is_not_planned_and_is_refused_as_triton_does() -> None:
    header = {"inputs": [binary_input("A", INT64, "INT64"), binary_input("A", BOOL, "BOOL")]}
    body, length = body_of(header, INT64, BOOL)
    assert make_plan(json.loads(body[:length])) is None
    with pytest.raises(InvalidArgumentError, match=r"^\[request id: <id_unknown>\] input 'A' "):
        request_codec.decode_infer_request(body, length, "m", "2")


def test_an_output_named_twice_is_not_planned_and_answers_once_with_its_first_parameters() -> None:
    outputs = [{"name": "X", "parameters": {"binary_data": False}}]
    outputs += [{"name": "Y"}, {"name": "X", "parameters": {"binary_data": True}}]
    header = {"inputs": [binary_input("A", INT64, "INT64")], "outputs": outputs}
    body, length = body_of(header, INT64)
    assert make_plan(json.loads(body[:length])) is None
    request, _ = request_codec.decode_infer_request(body, length, "m")
    assert request.requested_outputs == ["X", "Y"]  # as Triton's std::set and first emplace
    assert request.output_parameters["X"] == {"binary_data": False}


@pytest.mark.parametrize("case", USUAL)
def test_a_planned_request_equals_the_full_decode(case: str) -> None:
    header, arrays = USUAL[case]
    body, length = body_of(header, *arrays)
    assert make_plan(json.loads(body[:length])) is not None
    expected, binary_default = full_decode(body, length)
    for _ in range(2):  # made, then taken from the cache
        request, binary = request_codec.decode_infer_request(body, length, "m", "2")
        assert summary(request) == summary(expected)
        assert binary is binary_default is False


def test_planned_inputs_are_views_of_the_body() -> None:
    header, arrays = USUAL["perf_analyzer"]
    body, length = body_of(header, *arrays)
    request, _ = request_codec.decode_infer_request(body, length, "m")
    array = request.inputs["INPUT0"].array
    assert not array.flags.owndata and not array.flags.writeable


UNUSUAL: dict[str, Any] = {
    "json data": {"inputs": [{"name": "A", "datatype": "INT32", "shape": [1], "data": [1]}]},
    "request parameters": {
        "inputs": [binary_input("A", INT64, "INT64")],
        "parameters": {"binary_data_output": True},
    },
    "bytes input": {
        "inputs": [{"name": "A", "datatype": "BYTES", "shape": [1]}],
    },
    "extra input parameter": {
        "inputs": [
            {**binary_input("A", INT64, "INT64"), "parameters": {"binary_data_size": 48, "k": 1}}
        ],
    },
    "classification": {
        "inputs": [binary_input("A", INT64, "INT64")],
        "outputs": [{"name": "X", "parameters": {"classification": 2}}],
    },
    "binary_data not a bool": {
        "inputs": [binary_input("A", INT64, "INT64")],
        "outputs": [{"name": "X", "parameters": {"binary_data": 1}}],
    },
    "size not the shape's": {
        "inputs": [{**binary_input("A", INT64, "INT64"), "parameters": {"binary_data_size": 8}}],
    },
    "datatype not a string": {
        "inputs": [{**binary_input("A", INT64, "INT64"), "datatype": ["INT64"]}],
    },
    "bool dimension": {"inputs": [{**binary_input("A", BOOL, "BOOL"), "shape": [True, 3]}]},
    "id not a string": {"id": 5, "inputs": [binary_input("A", INT64, "INT64")]},
    "outputs not a list": {"inputs": [binary_input("A", INT64, "INT64")], "outputs": {}},
    "not an object": [],
}


@pytest.mark.parametrize("case", UNUSUAL)
def test_unusual_headers_get_no_plan(case: str) -> None:
    assert make_plan(UNUSUAL[case]) is None


@pytest.mark.parametrize("case", UNUSUAL)
def test_unusual_requests_decode_or_fail_as_the_full_decoder(case: str) -> None:
    body, length = body_of(UNUSUAL[case], INT64)
    try:
        expected: Any = summary(full_decode(body, length)[0])
    except WorkbenchError as exc:
        expected = (type(exc), str(exc))
    try:
        got: Any = summary(request_codec.decode_infer_request(body, length, "m", "2")[0])
    except WorkbenchError as exc:
        got = (type(exc), str(exc))
    assert got == expected


@pytest.mark.parametrize("extra", [b"", b"\x00" * 4, b"\x00" * 200])
def test_a_body_that_does_not_fit_its_plan_gets_the_full_decoders_error(extra: bytes) -> None:
    header, arrays = USUAL["perf_analyzer"]
    body, length = body_of(header, *arrays)
    request_codec.decode_infer_request(body, length, "m")  # the plan is made
    short = body[:-8] + extra
    with pytest.raises(InvalidArgumentError) as planned:
        request_codec.decode_infer_request(short, length, "m")
    with pytest.raises(InvalidArgumentError) as full:
        full_decode(short, length)
    assert str(planned.value) == str(full.value)


# -- responses -----------------------------------------------------------------------------------
def response_of(*tensors: Tensor, **fields: Any) -> InferResponse:
    return InferResponse("m", fields.pop("version", "1"), outputs=list(tensors), **fields)


def asked(**binary: bool | None) -> InferRequest:
    request = InferRequest("m")
    for name, flag in binary.items():
        request.output_parameters[name] = {} if flag is None else {"binary_data": flag}
    return request


def numbers(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=WIRE_TO_NUMPY[datatype]).reshape(shape)


BINARY_RESPONSES = {
    "one output": (response_of(Tensor("OUT", "FP32", FP32)), asked(OUT=True), False),
    "id and several": (
        response_of(Tensor("A", "INT64", INT64), Tensor("B", "BOOL", BOOL), id="r-1", version="3"),
        asked(A=True),
        True,
    ),
    "non-contiguous and big-endian": (
        response_of(Tensor("A", "INT64", INT64.T), Tensor("B", "FP32", FP32.astype(">f4")), id="é"),
        asked(),
        True,
    ),
    "all empty": (response_of(Tensor("E", "INT32", EMPTY)), asked(E=True), False),
    "empty and not": (
        response_of(Tensor("E", "INT32", EMPTY), Tensor("H", "FP16", numbers("FP16", (2, 2)))),
        asked(E=True, H=True),
        False,
    ),
}


@pytest.mark.parametrize("case", BINARY_RESPONSES)
def test_a_binary_response_is_the_general_encoding(case: str) -> None:
    response, request, binary_default = BINARY_RESPONSES[case]
    expected = encode_infer_response(response, request, binary_default)
    for _ in range(2):  # written, then taken from the cache
        assert encode_binary_response(response, request, binary_default) == expected


def test_a_cached_head_follows_the_shape() -> None:
    request = asked(OUT=True)
    for shape in [(1, 16), (2, 8), (1, 16)]:
        response = response_of(Tensor("OUT", "FP32", FP32.reshape(shape)))
        expected = encode_infer_response(response, request, False)
        assert encode_binary_response(response, request, False) == expected


OTHER_RESPONSES = {
    "json output": (response_of(Tensor("OUT", "FP32", FP32)), asked(OUT=False), True),
    "unlisted, json by default": (response_of(Tensor("OUT", "FP32", FP32)), asked(), False),
    "listed without binary_data": (response_of(Tensor("OUT", "FP32", FP32)), asked(OUT=None), True),
    "bytes": (
        response_of(Tensor("S", "BYTES", np.array([b"a"], dtype=object))),
        asked(S=True),
        False,
    ),
    "parameters": (
        response_of(Tensor("OUT", "FP32", FP32), parameters={"k": 1}),
        asked(OUT=True),
        False,
    ),
}


@pytest.mark.parametrize("case", OTHER_RESPONSES)
def test_other_responses_take_the_general_encoder(case: str) -> None:
    response, request, binary_default = OTHER_RESPONSES[case]
    assert encode_binary_response(response, request, binary_default) is None


def test_outputs_asked_as_classes_take_the_general_path() -> None:
    request = InferRequest("m")
    request.output_parameters["OUT"] = {"binary_data": True, "classification": 2}
    response = response_of(Tensor("OUT", "FP32", FP32))
    assert encode_binary_response(response, request, False) is None


# -- paths and routes ----------------------------------------------------------------------------
URLS = [
    b"/v2/models/add_one/infer",
    b"/v2/models/add_one/infer",  # twice: remembered
    b"/v2/models/a%20b/versions/2/infer?x=1#frag",
    b"//double/slash",
    b"http://host:8000/v2/health/ready",
    b"/v2/models/" + b"x" * 600 + b"/infer",  # too long to remember
]


@pytest.mark.parametrize("url", URLS)
def test_request_path_is_parse_url_and_unquote(url: bytes) -> None:
    assert request_path(url) == unquote(httptools.parse_url(url).path.decode("latin-1"))


PATHS = [
    "/v2/models/add_one/infer",
    "/v2/models/add_one/infer",
    "/v2/models/m/versions/3/infer",
    "/v2/models/m/versions/x/infer",
    "/v2/models/m",
    "/v2/models/m/trace/setting",
    "/v2/health/live",
    "/v2/models/" + "x" * 600 + "/ready",
]


@pytest.mark.parametrize("path", PATHS)
def test_model_route_is_the_regular_expression(path: str) -> None:
    match = _MODEL.fullmatch(path)
    expected = None if match is None else (match[1], match[2] or "", match[3] or "")
    assert model_route(path) == expected


# -- tensor bytes --------------------------------------------------------------------------------
ARRAYS = {
    "contiguous": FP32,
    "transposed": INT64.T,
    "empty": EMPTY,
    "big-endian": FP32.astype(">f4"),
    "scalar": np.float64(2.5).reshape(()),
    "bool": BOOL,
    "half": HALF,
}


@pytest.mark.parametrize("case", ARRAYS)
def test_tensor_buffer_is_the_little_endian_element_bytes(case: str) -> None:
    array = ARRAYS[case]
    expected = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    assert bytes(tensor_buffer(array, "FP32")) == expected


def test_tensor_buffer_refuses_an_object_array_as_before() -> None:
    with pytest.raises(TypeError, match="Cannot change data-type for object array"):
        tensor_buffer(np.array([1.0, 2.0], dtype=object), "FP32")
