"""Malformed requests side by side: real tritonserver 2.51 and the embedded server answer each
with the same status and message, and both keep serving.

The cases come from trying the server as a careless or hostile client would (issue #12):
bytes that are not a protobuf message, an input named twice, raw contents that do not match
the inputs, a load whose ``config`` is not JSON, and a ``config.pbtxt`` with bytes that are not
UTF-8 in a comment (which used to stop our server from starting at all).

Then requests with two faults, where the order of Triton's checks decides the answer: its front
ends pass shape and bytes on as they are and its core checks the shape against the config
before the byte size (``InferenceRequest::Normalize``, core ``src/infer_request.cc``), walking
the inputs in its ``unordered_map`` order (newest first for two); a BYTES element cut short is
counted by the core and refused by the backend (``ValidateStringBuffer``, backend
``src/backend_common.cc``). And what Triton's HTTP front end (``src/http_server.cc``) takes that
a stricter parser would not: bytes that are not UTF-8 in the JSON, a header length read with
``atoi``, parameters that are not an object, an output named twice, an unload whose body is not
JSON; and a ``config.pbtxt`` or a model folder name with bytes that are not UTF-8.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.integration.peers import Peers, TritonServerProcess, copy_repository
from workbench.server.hosting import Server

CONFORMANCE_REPO = Path(__file__).resolve().parents[1] / "assets" / "conformance_repo"
TENSOR: dict[str, Any] = {
    "name": "INPUT0",
    "shape": [1, 16],
    "datatype": "FP32",
    "data": [1.0] * 16,
}
#: loaded at start; the others are loaded (or only listed) by the tests
STARTUP_MODELS = ("add_one", "echo_bytes", "fails_on_negative", "identity_all", "latin1_comment")
#: a model folder whose name is not UTF-8 (``os.fsdecode`` of the byte 0xff)
ODD_FOLDER = "bad\udcffname"


def _repository(root: Path) -> Path:
    """The conformance models, plus copies of ``add_one`` with bytes that are not UTF-8: in a
    comment, in a string value, in a field name, and in the folder's name (its config names no
    model)."""
    copy_repository(CONFORMANCE_REPO, root)
    name = b'name: "add_one"'
    _add_one_copy(root, "latin1_comment", name, b'name: "latin1_comment"  # caf\xe9 \xff')
    value = b'name: "latin1_value"\nparameters { key: "k" value { string_value: "caf\xe9" } }'
    _add_one_copy(root, "latin1_value", name, value)
    _add_one_copy(root, "latin1_field", name, b'name: "latin1_field"\nna\xffme: "x"')
    _add_one_copy(root, ODD_FOLDER, name, b"")
    return root


def _add_one_copy(root: Path, folder: str, old: bytes, new: bytes) -> None:
    model = root / folder
    (model / "1").mkdir(parents=True)
    config = (CONFORMANCE_REPO / "add_one" / "config.pbtxt").read_bytes()
    (model / "config.pbtxt").write_bytes(config.replace(old, new))
    shutil.copy(CONFORMANCE_REPO / "add_one" / "1" / "model.py", model / "1" / "model.py")


@pytest.fixture(scope="module")
def both(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``{"triton": (http_url, grpc_target), "ours": (...)}`` on copies of one repository."""
    workdir = tmp_path_factory.mktemp("bad_requests")
    ours = Server(
        _repository(workdir / "our_repo"),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=list(STARTUP_MODELS),
    )
    triton = TritonServerProcess(
        peers,
        _repository(workdir / "triton_repo"),
        log_path=workdir / "tritonserver.log",
        load_models=STARTUP_MODELS,
    )
    with triton, ours:
        assert ours.grpc_url is not None
        yield {
            "triton": (f"http://{triton.http_url}", triton.grpc_url),
            "ours": (ours.url, ours.grpc_url),
        }


def _grpc(target: str, method: str, payload: Any, *, raw: bool = False) -> tuple[str, str]:
    with grpc.insecure_channel(target) as channel:
        if raw:  # bytes as they are, no serializer
            call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
        else:
            call = getattr(service_pb2_grpc.GRPCInferenceServiceStub(channel), method)
        try:
            call(payload, timeout=30)
        except grpc.RpcError as error:
            return error.code().name, error.details()
    return "OK", ""


def _infer_message(raw_contents: int, shape: tuple[int, ...] = (1, 16)) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="add_one")
    message.inputs.add(name="INPUT0", datatype="FP32", shape=shape)
    message.raw_input_contents.extend([np.ones(16, np.float32).tobytes()] * raw_contents)
    return message


def _message(
    model: str, inputs: Sequence[tuple[str, str, tuple[int, ...]]], raw: list[bytes]
) -> pb.ModelInferRequest:
    """Inputs as (name, datatype, shape), then the raw contents as they are."""
    message = pb.ModelInferRequest(model_name=model)
    for name, datatype, shape in inputs:
        message.inputs.add(name=name, datatype=datatype, shape=shape)
    message.raw_input_contents.extend(raw)
    return message


ONES = np.ones(16, np.float32).tobytes()
CUT_STRING = b"\xff\x00\x00\x00ab"  # says 255 bytes, has 2
TWO_INPUTS = [("IN_FP32", "FP32", (1, 16)), ("IN_INT32", "INT32", (1, 16))]


INFER = "/v2/models/add_one/infer"


def _tensor(**fields: Any) -> dict[str, Any]:
    """``TENSOR`` with ``fields`` replaced."""
    return {**TENSOR, **fields}


def _binary_tensor(shape: list[int] | None = None, size: int = 64) -> dict[str, Any]:
    tensor = {"name": "INPUT0", "shape": [1, 16] if shape is None else shape, "datatype": "FP32"}
    return {**tensor, "parameters": {"binary_data_size": size}}


def _binary(header: dict[str, Any], data: bytes) -> dict[str, Any]:
    """``requests`` arguments for a JSON header followed by binary tensor data."""
    head = json.dumps(header).encode()
    return {"data": head + data, "headers": {"Inference-Header-Content-Length": str(len(head))}}


def _json_with_header_length(value: bytes) -> dict[str, Any]:
    return {"data": json.dumps({"inputs": [TENSOR]}).encode(), "headers": {_LENGTH: value}}


_LENGTH = "Inference-Header-Content-Length"


def _identity(datatype: str, batch: int) -> dict[str, Any]:
    return {
        "name": f"IN_{datatype}",
        "shape": [batch, 1],
        "datatype": datatype,
        "data": [1] * batch,
    }


def _strings(data: list[Any], shape: list[int]) -> dict[str, Any]:
    return {"name": "INPUT0", "shape": shape, "datatype": "BYTES", "data": data}


def _binary_strings(size: int, shape: list[int]) -> dict[str, Any]:
    tensor = {"name": "INPUT0", "shape": shape, "datatype": "BYTES"}
    return {**tensor, "parameters": {"binary_data_size": size}}


GRPC_CASES = {
    "not_a_protobuf_message": ("ModelInfer", b"\xff\xff\xff", True),
    "more_raw_contents_than_inputs": ("ModelInfer", _infer_message(2), False),
    "no_raw_contents": ("ModelInfer", _infer_message(0), False),
    "two_unspecified_dims": ("ModelInfer", _infer_message(1, (-1, -1)), False),
    "a_negative_dim": ("ModelInfer", _infer_message(1, (1, -16)), False),
    "a_negative_batch": ("ModelInfer", _infer_message(1, (-1, 16)), False),
    # two faults: the shape (or the type) is refused before the byte size
    "shape_and_size_both_wrong": ("ModelInfer", _infer_message(1, (1, 8)), False),
    "type_and_size_both_wrong": (
        "ModelInfer",
        _message("add_one", [("INPUT0", "INT32", (1, 8))], [ONES]),
        False,
    ),
    "no_shape_with_data": ("ModelInfer", _infer_message(1, ()), False),
    "a_dim_of_2_to_the_62": ("ModelInfer", _infer_message(1, (1, 2**62)), False),
    "dims_whose_product_overflows": ("ModelInfer", _infer_message(1, (1, 2**32, 2**32)), False),
    "fewer_raw_contents_than_two_inputs": (
        "ModelInfer",
        _message("identity_all", TWO_INPUTS, [ONES]),
        False,
    ),
    "more_raw_contents_than_two_inputs": (
        "ModelInfer",
        _message("identity_all", TWO_INPUTS, [ONES] * 3),
        False,
    ),
    "batch_sizes_differ": (
        "ModelInfer",
        _message("identity_all", [TWO_INPUTS[0], ("IN_INT32", "INT32", (2, 8))], [ONES] * 2),
        False,
    ),
    "second_input_shape_first_input_size_wrong": (
        "ModelInfer",
        _message(
            "identity_all",
            [("IN_FP32", "FP32", (1, 8)), ("IN_INT32", "INT32", (1, 3, 4))],
            [ONES] * 2,
        ),
        False,
    ),
    "bytes_element_cut_short": (
        "ModelInfer",
        _message("echo_bytes", [("INPUT0", "BYTES", (1, 1))], [CUT_STRING]),
        False,
    ),
    "bytes_shape_wrong_and_element_cut_short": (
        "ModelInfer",
        _message("echo_bytes", [("INPUT0", "BYTES", (1, 1, 1))], [CUT_STRING]),
        False,
    ),
    "two_unknown_outputs": (
        "ModelInfer",
        pb.ModelInferRequest(
            model_name="add_one",
            inputs=[
                pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 16])
            ],
            outputs=[
                pb.ModelInferRequest.InferRequestedOutputTensor(name="ZZZ"),
                pb.ModelInferRequest.InferRequestedOutputTensor(name="AAA"),
            ],
            raw_input_contents=[ONES],
        ),
        False,
    ),
    "load_a_config_with_bytes_that_are_not_utf8_in_a_value": (
        "RepositoryModelLoad",
        pb.RepositoryModelLoadRequest(model_name="latin1_value"),
        False,
    ),
    "load_config_not_json": (
        "RepositoryModelLoad",
        pb.RepositoryModelLoadRequest(
            model_name="add_one",
            parameters={"config": pb.ModelRepositoryParameter(string_param="{not json")},
        ),
        False,
    ),
    "load_files_without_config": (
        "RepositoryModelLoad",
        pb.RepositoryModelLoadRequest(
            model_name="uploaded",
            parameters={"file:1/model.py": pb.ModelRepositoryParameter(bytes_param=b"x = 1\n")},
        ),
        False,
    ),
}
HTTP_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "load_files_without_config": (
        "/v2/repository/models/uploaded/load",
        {"json": {"parameters": {"file:1/model.py": base64.b64encode(b"x = 1\n").decode()}}},
    ),
    "input_named_twice": ("/v2/models/add_one/infer", {"json": {"inputs": [TENSOR, TENSOR]}}),
    "load_config_not_json": (
        "/v2/repository/models/add_one/load",
        {"json": {"parameters": {"config": "{not json"}}},
    ),
    "truncated_json": ("/v2/models/add_one/infer", {"data": b'{"inputs": ['}),
    "two_unspecified_dims": (INFER, {"json": {"inputs": [_tensor(shape=[-1, -1])]}}),
    "a_dim_past_uint64": (INFER, {"json": {"inputs": [_tensor(shape=[1, 10**20])]}}),
    "a_dim_in_the_top_half_of_uint64": (
        INFER,
        _binary({"inputs": [_binary_tensor(shape=[1, 2**64 - 16])]}, ONES),
    ),
    "no_shape_with_data": (INFER, {"json": {"inputs": [_tensor(shape=[])]}}),
    "binary_shape_and_size_both_wrong": (
        INFER,
        _binary({"inputs": [_binary_tensor(shape=[1, 8])]}, ONES),
    ),
    "binary_no_shape": (INFER, _binary({"inputs": [_binary_tensor(shape=[])]}, ONES)),
    "binary_size_short_of_the_body": (
        INFER,
        _binary({"inputs": [_binary_tensor(size=32)]}, ONES),
    ),
    "an_empty_batch": (INFER, {"json": {"inputs": [_tensor(shape=[0, 16], data=[])]}}),
    "batch_too_big_and_wrong_type": (
        INFER,
        {"json": {"inputs": [_tensor(shape=[9, 16], datatype="INT32", data=[1] * 144)]}},
    ),
    "input_not_an_object": (INFER, {"json": {"inputs": [1]}}),
    "output_not_an_object": (INFER, {"json": {"inputs": [TENSOR], "outputs": [1]}}),
    "two_unknown_outputs": (
        INFER,
        {"json": {"inputs": [TENSOR], "outputs": [{"name": "ZZZ"}, {"name": "AAA"}]}},
    ),
    "an_unknown_input_listed_in_map_order": (
        INFER,
        {"json": {"inputs": [TENSOR, _tensor(name="X")]}},  # Triton lists 'X' first
    ),
    "two_unknown_inputs": (
        "/v2/models/identity_all/infer",
        {"json": {"inputs": [_tensor(name="ZZ"), _tensor(name="AA")]}},
    ),
    "an_unknown_input_and_one_without_shape": (
        "/v2/models/identity_all/infer",
        {"json": {"inputs": [_tensor(name="ZZ"), _tensor(name="IN_FP32", shape=[])]}},
    ),
    "three_batch_sizes": (
        "/v2/models/identity_all/infer",
        {"json": {"inputs": [_identity("FP32", 1), _identity("INT32", 2), _identity("INT8", 3)]}},
    ),
    "an_input_name_not_utf8": (
        INFER,
        {"data": json.dumps({"inputs": [_tensor(name="IN@0")]}).encode().replace(b"@", b"\xe9")},
    ),
    "header_length_not_a_number": (INFER, _json_with_header_length(b"abc")),
    "header_length_digits_then_text": (INFER, _json_with_header_length(b"12abc")),
    "bytes_not_strings": (
        "/v2/models/echo_bytes/infer",
        {"json": {"inputs": [_strings([1, 2], shape=[1, 2])]}},
    ),
    "bytes_fewer_strings_than_the_shape": (
        "/v2/models/echo_bytes/infer",
        {"json": {"inputs": [_strings(["a"], shape=[1, 2])]}},
    ),
    "bytes_element_cut_short": (
        "/v2/models/echo_bytes/infer",
        _binary({"inputs": [_binary_strings(len(CUT_STRING), shape=[1, 1])]}, CUT_STRING),
    ),
    "bytes_shape_wrong_and_element_cut_short": (
        "/v2/models/echo_bytes/infer",
        _binary({"inputs": [_binary_strings(len(CUT_STRING), shape=[1, 1, 1])]}, CUT_STRING),
    ),
}
#: malformed, yet Triton answers them: the whole reply is compared
HTTP_ACCEPTED: dict[str, tuple[str, dict[str, Any]]] = {
    "a_body_not_utf8": (
        INFER,
        {"data": json.dumps({"id": "@", "inputs": [TENSOR]}).encode().replace(b"@", b"\xff")},
    ),
    "input_parameters_not_an_object": (INFER, {"json": {"inputs": [_tensor(parameters=[1])]}}),
    "output_parameters_not_an_object": (
        INFER,
        {"json": {"inputs": [TENSOR], "outputs": [{"name": "OUTPUT0", "parameters": "x"}]}},
    ),
    "an_output_named_twice": (
        INFER,
        {"json": {"inputs": [TENSOR], "outputs": [{"name": "OUTPUT0"}] * 2}},
    ),
    "an_output_named_twice_keeps_its_first_parameters": (
        INFER,
        {
            "json": {
                "inputs": [TENSOR],
                "outputs": [
                    {"name": "OUTPUT0", "parameters": {"binary_data": True}},
                    {"name": "OUTPUT0", "parameters": {"binary_data": False}},
                ],
            }
        },
    ),
    "unload_body_not_json": ("/v2/repository/models/nope/unload", {"data": b"{bad json"}),
    "unload_dependents_not_a_bool": (
        "/v2/repository/models/nope/unload",
        {"json": {"parameters": {"unload_dependents": 3}}},
    ),
}


@pytest.mark.integration
@pytest.mark.conformance
@pytest.mark.parametrize("case", sorted(GRPC_CASES))
def test_grpc_bad_requests_answer_as_triton(both: dict[str, Any], case: str) -> None:
    method, payload, raw = GRPC_CASES[case]
    answers = {name: _grpc(target, method, payload, raw=raw) for name, (_, target) in both.items()}
    # Triton accepts more raw contents than inputs (the extra ones are ignored): so do we
    assert answers["ours"] == answers["triton"]
    _assert_still_serving(both)


@pytest.mark.integration
@pytest.mark.conformance
@pytest.mark.parametrize("case", sorted(HTTP_CASES))
def test_http_bad_requests_answer_as_triton(both: dict[str, Any], case: str) -> None:
    path, body = HTTP_CASES[case]
    answers = {}
    for name, (http, _) in both.items():
        reply = requests.post(f"{http}{path}", timeout=30, **body)
        answers[name] = (reply.status_code, reply.text)
    assert answers["ours"] == answers["triton"]
    assert answers["ours"][0] >= 400
    _assert_still_serving(both)


@pytest.mark.integration
@pytest.mark.conformance
@pytest.mark.parametrize("case", sorted(HTTP_ACCEPTED))
def test_http_requests_triton_takes_as_they_are_answer_the_same(
    both: dict[str, Any], case: str
) -> None:
    path, body = HTTP_ACCEPTED[case]
    answers = {}
    for name, (http, _) in both.items():
        reply = requests.post(f"{http}{path}", timeout=30, **body)
        answers[name] = (reply.status_code, reply.headers.get(_LENGTH), reply.content)
    assert answers["ours"] == answers["triton"]
    assert answers["ours"][0] == 200
    _assert_still_serving(both)


@pytest.mark.integration
@pytest.mark.conformance
def test_grpc_an_output_named_twice_is_answered_once(both: dict[str, Any]) -> None:
    message = _infer_message(1)
    message.outputs.add(name="OUTPUT0")
    message.outputs.add(name="OUTPUT0")
    for _, target in both.values():
        with grpc.insecure_channel(target) as channel:
            reply = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(message)
        assert [output.name for output in reply.outputs] == ["OUTPUT0"]
        assert len(reply.raw_output_contents) == 1


@pytest.mark.integration
@pytest.mark.conformance
def test_a_config_with_bytes_that_are_not_utf8_in_a_value_loads(both: dict[str, Any]) -> None:
    for http, _ in both.values():
        reply = requests.post(f"{http}/v2/repository/models/latin1_value/load", timeout=60)
        assert (reply.status_code, reply.text) == (200, "")
        index = requests.post(f"{http}/v2/repository/index", json={"ready": True}, timeout=30)
        assert {"name": "latin1_value", "version": "1", "state": "READY"} in index.json()
    _assert_still_serving(both)


@pytest.mark.integration
@pytest.mark.conformance
def test_a_model_folder_whose_name_is_not_utf8_is_listed_as_its_bytes(
    both: dict[str, Any],
) -> None:
    for http, _ in both.values():
        reply = requests.post(f"{http}/v2/repository/index", json={}, timeout=30)
        assert reply.status_code == 200
        assert b'{"name":"bad\xffname"}' in reply.content


@pytest.mark.integration
@pytest.mark.conformance
def test_a_config_with_bytes_that_are_not_utf8_in_a_comment_loads(both: dict[str, Any]) -> None:
    for http, _ in both.values():
        index = requests.post(f"{http}/v2/repository/index", json={}, timeout=30).json()
        entry = [e for e in index if e["name"] == "latin1_comment"]
        assert entry == [{"name": "latin1_comment", "version": "1", "state": "READY"}]
        reply = requests.post(f"{http}/v2/repository/models/latin1_comment/load", timeout=60)
        assert (reply.status_code, reply.text) == (200, "")


@pytest.mark.integration
@pytest.mark.conformance
def test_a_config_with_bytes_that_are_not_utf8_in_a_field_name_fails_to_load(
    both: dict[str, Any],
) -> None:
    answers, entries = {}, {}
    for name, (http, _) in both.items():
        reply = requests.post(f"{http}/v2/repository/models/latin1_field/load", timeout=60)
        ready = requests.get(f"{http}/v2/models/latin1_field/ready", timeout=30)
        answers[name] = (reply.status_code, reply.json(), ready.status_code)
        index = requests.post(f"{http}/v2/repository/index", json={}, timeout=30).json()
        [entries[name]] = [e for e in index if e["name"] == "latin1_field"]
    error = "failed to load 'latin1_field', failed to poll from model repository"
    assert answers["triton"] == answers["ours"] == (500, {"error": error}, 400)
    # Triton lists the name alone and logs why ('Poll failed for model directory ...',
    # protobuf's 'no field named "na"'); ours adds the state and that reason to the entry
    assert entries["triton"] == {"name": "latin1_field"}
    assert entries["ours"]["state"] == "UNAVAILABLE"
    reason = entries["ours"]["reason"]
    assert "latin1_field/config.pbtxt:3:1: " in reason and 'no field named "na"' in reason
    _assert_still_serving(both)


def _assert_still_serving(both: dict[str, Any]) -> None:
    for http, _ in both.values():
        body = {"inputs": [TENSOR]}
        reply = requests.post(f"{http}/v2/models/add_one/infer", json=body, timeout=30)
        assert reply.status_code == 200
        assert reply.json()["outputs"][0]["data"] == [2.0] * 16
