"""Traces of BLS calls side by side: real Triton 2.51 and ours.

``bls_traced`` (``tests/assets/trace_bls_repo``) calls ``add_one`` twice through BLS, once with
``trace=request.trace()`` and once without; ``bls_traced_request_id`` calls ``request_id_echo``
with ``request_id="child-1"`` and the trace; ``bls_traced_decoupled`` calls ``decoupled_linger``
with ``exec(decoupled=True)`` (``request_id="stream-1"``) and ``async_exec(decoupled=True)``, both
traced. Each caller is also served as ``<caller>_in_process``, kept in the server's process
(``WORKBENCH_IN_PROCESS``, a parameter real Triton ignores). Traced with ``--trace-config
triton,file=...,level=TIMESTAMPS,rate=1,log-frequency=1``, every request's file must hold the
same traces as real Triton's: a BLS call made with ``trace=`` as a child (``parent_id``, its own
``request_id`` only when it has one, no INFER_RESPONSE_COMPLETE, decoupled or not) written
before its parent, newest first, the other not at all (``docs/triton-trace-facts.md``,
"Streams, generate, BLS and cache hits").
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.peers import REPO_ROOT, Peers, gather_models
from tests.integration.test_conformance_trace import (
    _assert_lived_in_order,
    _http,
    _structure,
)
from tests.integration.trace_cases import Found, run_cases, traced_pair
from workbench.bench.trace import trace_rows

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

ASSETS = REPO_ROOT / "tests" / "assets"
#: the calling models, each also served as ``<name>_in_process``
CALLERS = ["bls_traced", "bls_traced_request_id", "bls_traced_decoupled"]
MODELS = {
    "add_one": ASSETS / "conformance_repo",
    "decoupled_linger": ASSETS / "trace_bls_repo",
    "request_id_echo": ASSETS / "trace_bls_repo",
    **{caller: ASSETS / "trace_bls_repo" for caller in CALLERS},
}
IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'


def _repository(destination: Path) -> Path:
    """The models, and ``<caller>_in_process``: each caller kept in the server's process."""
    repository = gather_models(MODELS, destination)
    for caller in CALLERS:
        copy = repository / f"{caller}_in_process"
        shutil.copytree(repository / caller, copy)
        config = copy / "config.pbtxt"
        text = config.read_text().replace(f'name: "{caller}"', f'name: "{caller}_in_process"')
        config.write_text(text + IN_PROCESS)
    return repository


def _post(model: str, request_id: str, tensor: dict[str, Any] | None = None) -> Callable[..., Any]:
    tensor = tensor or {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
    body: dict[str, Any] = {"inputs": [tensor]}
    if request_id:
        body["id"] = request_id
    return lambda port, address: _http(port, "POST", f"/v2/models/{model}/infer", body)


def _count(model: str, request_id: str) -> Callable[..., Any]:
    """``_post`` to ``bls_traced_decoupled``: two responses from each call."""
    return _post(
        model, request_id, {"name": "COUNT", "shape": [1], "datatype": "INT32", "data": [2]}
    )


def _grpc(model: str, request_id: str) -> Callable[..., Any]:
    def call(port: int, address: str) -> Any:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        client = grpcclient.InferenceServerClient(address)
        result = client.infer(model, [tensor], request_id=request_id)
        names = [output.name for output in result.get_response().outputs]
        return {name: result.as_numpy(name).tolist() for name in names}

    return call


#: (what is traced, the call); each writes the next indexed file. ``bls_traced``:
ONE_CHILD: list[tuple[str, Callable[..., Any]]] = [
    ("http_stub", _post("bls_traced", "b-1")),
    ("http_stub_without_id", _post("bls_traced", "")),
    ("grpc_stub", _grpc("bls_traced", "b-2")),
    ("http_in_process", _post("bls_traced_in_process", "b-3")),
    ("grpc_in_process", _grpc("bls_traced_in_process", "")),
]
#: ``bls_traced_request_id``
NAMED_CHILD: list[tuple[str, Callable[..., Any]]] = [
    ("http_stub_request_id", _post("bls_traced_request_id", "b-4")),
    ("grpc_stub_request_id", _grpc("bls_traced_request_id", "")),
    ("grpc_in_process_request_id", _grpc("bls_traced_request_id_in_process", "b-5")),
]
#: ``bls_traced_decoupled``
DECOUPLED: list[tuple[str, Callable[..., Any]]] = [
    ("http_stub_decoupled", _count("bls_traced_decoupled", "b-6")),
    ("http_in_process_decoupled", _count("bls_traced_decoupled_in_process", "")),
]
TRACED = ONE_CHILD + NAMED_CHILD + DECOUPLED


@pytest.fixture(scope="module")
def traced_files(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Found:
    """For each case of TRACED: (file name, its entries, the call's answer) per server."""
    pair = traced_pair(peers, tmp_path_factory.mktemp("trace_bls"), _repository)
    return run_cases(pair, TRACED)


@pytest.mark.parametrize("case", [name for name, _ in TRACED])
def test_trace_file_has_tritons_traces(case: str, traced_files: Found) -> None:
    (real_name, real, real_answer), (our_name, ours, our_answer) = traced_files[case]
    assert our_answer == real_answer
    assert our_name == real_name
    assert _structure(ours) == _structure(real)  # headers (parent_id), timestamp names counted
    assert [e["id"] for e in ours] == [e["id"] for e in real]  # the child's entries first
    if case not in dict(DECOUPLED):  # there a child ends after its caller (see below)
        _assert_lived_in_order(real)
        _assert_lived_in_order(ours)


def _caller(case: str, model: str) -> str:
    return f"{model}_in_process" if "in_process" in case else model


def test_only_the_call_made_with_trace_is_a_child_written_first(
    traced_files: Found,
) -> None:
    for case, _ in ONE_CHILD:
        for _, entries, _ in traced_files[case]:
            parent, child = _structure(entries)["traces"]  # ranked by id
            assert (child["parent"], child["model"][0]) == (parent["trace"], "add_one")
            assert (parent["parent"], parent["model"][0]) == (0, _caller(case, "bls_traced"))
            assert entries[0].get("parent_id") == entries[-1]["id"]  # the child is written first
            assert child["request_id"] is None
            assert "INFER_RESPONSE_COMPLETE" not in child["timestamps"]
            assert "INFER_RESPONSE_COMPLETE" in parent["timestamps"]


def _seen_by_the_called_model(answer: Any) -> str:
    """``REQUEST_ID`` of an answer: a gRPC call's outputs, or HTTP's (status, JSON)."""
    if isinstance(answer, dict):
        return str(answer["REQUEST_ID"][0][0].decode())
    outputs = {output["name"]: output["data"] for output in answer[1]["outputs"]}
    return str(outputs["REQUEST_ID"][0])


def test_a_bls_requests_own_id_names_its_child_and_reaches_the_called_model(
    traced_files: Found,
) -> None:
    for case, _ in NAMED_CHILD:
        for _, entries, answer in traced_files[case]:
            parent, child = _structure(entries)["traces"]
            assert (child["parent"], child["model"][0]) == (parent["trace"], "request_id_echo")
            assert child["request_id"] == "child-1"  # its own, never the caller's
            assert _seen_by_the_called_model(answer) == "child-1"


def test_decoupled_bls_calls_are_children_written_newest_first(traced_files: Found) -> None:
    """``decoupled_linger`` ends its request 0.3 s after its final response: the last call's
    request ends after its caller has answered, and the caller's trace waits for it."""
    for case, _ in DECOUPLED:
        for _, entries, _ in traced_files[case]:
            caller, _, last = trace_rows(entries)
            assert caller["HTTP_SEND_END"] < last["REQUEST_END"]  # ended after the answer
            parent, first, second = _structure(entries)["traces"]
            assert (parent["parent"], parent["model"][0]) == (
                0,
                _caller(case, "bls_traced_decoupled"),
            )
            for child, request_id in ((first, "stream-1"), (second, None)):
                assert (child["parent"], child["model"][0]) == (1, "decoupled_linger")
                assert child["request_id"] == request_id
                assert "INFER_RESPONSE_COMPLETE" not in child["timestamps"]
            ids = [e["id"] for e in entries]
            assert ids == sorted(ids, reverse=True)  # the async call's, the exec's, the caller's
