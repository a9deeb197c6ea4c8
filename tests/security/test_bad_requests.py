"""Malformed requests side by side: real tritonserver 2.51 and the embedded server answer each
with the same status and message, and both keep serving.

The cases come from trying the server as a careless or hostile client would (issue #12):
bytes that are not a protobuf message, an input named twice, raw contents that do not match
the inputs, a load whose ``config`` is not JSON, and a ``config.pbtxt`` with bytes that are not
UTF-8 in a comment (which used to stop our server from starting at all).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
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
TENSOR = {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}


def _repository(root: Path) -> Path:
    """The conformance models, plus one whose config has a Latin-1 byte in a comment."""
    copy_repository(CONFORMANCE_REPO, root)
    odd = root / "latin1_comment"
    (odd / "1").mkdir(parents=True)
    (odd / "config.pbtxt").write_bytes(
        (CONFORMANCE_REPO / "add_one" / "config.pbtxt")
        .read_bytes()
        .replace(b'name: "add_one"', b'name: "latin1_comment"  # caf\xe9 \xff')
    )
    shutil.copy(CONFORMANCE_REPO / "add_one" / "1" / "model.py", odd / "1" / "model.py")
    return root


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
        load_model=["*"],
    )
    triton = TritonServerProcess(
        peers, _repository(workdir / "triton_repo"), log_path=workdir / "tritonserver.log"
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


GRPC_CASES = {
    "not_a_protobuf_message": ("ModelInfer", b"\xff\xff\xff", True),
    "more_raw_contents_than_inputs": ("ModelInfer", _infer_message(2), False),
    "no_raw_contents": ("ModelInfer", _infer_message(0), False),
    "two_unspecified_dims": ("ModelInfer", _infer_message(1, (-1, -1)), False),
    "a_negative_dim": ("ModelInfer", _infer_message(1, (1, -16)), False),
    "a_negative_batch": ("ModelInfer", _infer_message(1, (-1, 16)), False),
    "load_config_not_json": (
        "RepositoryModelLoad",
        pb.RepositoryModelLoadRequest(
            model_name="add_one",
            parameters={"config": pb.ModelRepositoryParameter(string_param="{not json")},
        ),
        False,
    ),
}
HTTP_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "input_named_twice": ("/v2/models/add_one/infer", {"json": {"inputs": [TENSOR, TENSOR]}}),
    "load_config_not_json": (
        "/v2/repository/models/add_one/load",
        {"json": {"parameters": {"config": "{not json"}}},
    ),
    "truncated_json": ("/v2/models/add_one/infer", {"data": b'{"inputs": ['}),
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
def test_a_config_with_bytes_that_are_not_utf8_in_a_comment_loads(both: dict[str, Any]) -> None:
    for http, _ in both.values():
        index = requests.post(f"{http}/v2/repository/index", json={}, timeout=30).json()
        entry = [e for e in index if e["name"] == "latin1_comment"]
        assert entry == [{"name": "latin1_comment", "version": "1", "state": "READY"}]
        reply = requests.post(f"{http}/v2/repository/models/latin1_comment/load", timeout=60)
        assert (reply.status_code, reply.text) == (200, "")


def _assert_still_serving(both: dict[str, Any]) -> None:
    for http, _ in both.values():
        body = {"inputs": [TENSOR]}
        reply = requests.post(f"{http}/v2/models/add_one/infer", json=body, timeout=30)
        assert reply.status_code == 200
        assert reply.json()["outputs"][0]["data"] == [2.0] * 16
