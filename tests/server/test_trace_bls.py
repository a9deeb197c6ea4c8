"""BLS calls in traces, on our server alone (``test_conformance_trace_bls.py`` compares them
with real Triton's): a call made with ``trace=request.trace()`` is a child of the calling
request's trace, written first, under the BLS request's own ``request_id`` when it has one,
decoupled or not; a call without it, or made by an untraced request, is not traced. The caller
runs in a stub process and in the server's process."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.peers import REPO_ROOT
from tests.integration.test_conformance_trace import _http
from tests.integration.trace_cases import wait_for_trace_file
from workbench.bench.trace import trace_rows
from workbench.server.hosting import Server

pytestmark = pytest.mark.integration

ASSETS = REPO_ROOT / "tests" / "assets"
IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'
BODY = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]}
#: the repository of each model a caller calls
CALLED = {
    "add_one": "conformance_repo",
    "request_id_echo": "trace_bls_repo",
    "decoupled_linger": "trace_bls_repo",
}
CHILD = [
    "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
]  # fmt: skip


def _repository(
    root: Path, in_process: bool, caller: str = "bls_traced", called: str = "add_one"
) -> Path:
    """``caller`` from ``trace_bls_repo`` and the model it calls."""
    shutil.copytree(ASSETS / CALLED[called] / called, root / called)
    shutil.copytree(ASSETS / "trace_bls_repo" / caller, root / caller)
    if in_process:
        config = root / caller / "config.pbtxt"
        config.write_text(config.read_text() + IN_PROCESS)
    return root


def _traced_server(repository: Path, trace_file: Path, rate: int) -> Server:
    return Server(
        repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        trace_config=[f"triton,file={trace_file}", "level=TIMESTAMPS", f"rate={rate}",
                      "triton,log-frequency=1"],
    )  # fmt: skip


def _stamps(entries: list[dict[str, Any]], trace_id: int) -> list[str]:
    return [
        e["timestamps"][0]["name"] for e in entries if e["id"] == trace_id and "timestamps" in e
    ]


@pytest.mark.parametrize("in_process", [False, True], ids=["stub", "in_process"])
def test_a_bls_call_with_the_requests_trace_is_its_child(tmp_path: Path, in_process: bool) -> None:
    server = _traced_server(_repository(tmp_path / "repo", in_process), tmp_path / "trace.json", 2)
    with server:
        for request_id in ("1", "2", "3", "4"):  # rate 2: two of them are traced
            status, _ = _http(server.http_port, "POST", "/v2/models/bls_traced/infer",
                              {**BODY, "id": request_id})  # fmt: skip
            assert status == 200
        files = [wait_for_trace_file(tmp_path / f"trace.json.{i}") for i in range(2)]
    for entries, (child_id, parent_id) in zip(files, [(2, 1), (4, 3)], strict=True):
        headers = [e for e in entries if "model_name" in e]
        assert [(h["id"], h.get("parent_id"), h["model_name"]) for h in headers] == [
            (child_id, parent_id, "add_one"),
            (parent_id, None, "bls_traced"),
        ]
        assert "request_id" not in headers[0]
        assert _stamps(entries, child_id) == CHILD
        assert entries[0]["id"] == child_id  # written before its parent
    assert not (tmp_path / "trace.json.2").exists()


def _headers(entries: list[dict[str, Any]]) -> list[tuple[int, int | None, str, str | None]]:
    """(id, parent id, model, request id) of each trace, as written."""
    return [
        (e["id"], e.get("parent_id"), e["model_name"], e.get("request_id"))
        for e in entries
        if "model_name" in e
    ]


@pytest.mark.parametrize("in_process", [False, True], ids=["stub", "in_process"])
def test_a_bls_call_with_its_own_request_id_is_traced_under_it(
    tmp_path: Path, in_process: bool
) -> None:
    repository = _repository(
        tmp_path / "repo", in_process, "bls_traced_request_id", "request_id_echo"
    )
    with _traced_server(repository, tmp_path / "trace.json", 1) as server:
        status, answer = _http(server.http_port, "POST", "/v2/models/bls_traced_request_id/infer",
                               {**BODY, "id": "caller"})  # fmt: skip
        entries = wait_for_trace_file(tmp_path / "trace.json.0")
    assert status == 200
    seen = {output["name"]: output["data"] for output in answer["outputs"]}["REQUEST_ID"]
    assert seen == ["child-1"]  # what the called model's request_id() said
    assert _headers(entries) == [
        (2, 1, "request_id_echo", "child-1"),
        (1, None, "bls_traced_request_id", "caller"),
    ]
    assert _stamps(entries, 2) == CHILD


@pytest.mark.parametrize("in_process", [False, True], ids=["stub", "in_process"])
def test_decoupled_bls_calls_are_children_written_with_their_caller_even_ending_after_it(
    tmp_path: Path, in_process: bool
) -> None:
    """``decoupled_linger`` ends its request 0.3 s after its final response: the caller has
    answered by then, and its trace waits for the children's (as Triton's does)."""
    repository = _repository(
        tmp_path / "repo", in_process, "bls_traced_decoupled", "decoupled_linger"
    )
    count = {"inputs": [{"name": "COUNT", "shape": [1], "datatype": "INT32", "data": [2]}]}
    with _traced_server(repository, tmp_path / "trace.json", 1) as server:
        status, answer = _http(server.http_port, "POST", "/v2/models/bls_traced_decoupled/infer",
                               count)  # fmt: skip
        entries = wait_for_trace_file(tmp_path / "trace.json.0")
    assert status == 200
    assert answer["outputs"][0]["data"] == [0, 1, 0, 1]
    assert _headers(entries) == [
        (3, 1, "decoupled_linger", None),  # async_exec(decoupled=True)
        (2, 1, "decoupled_linger", "stream-1"),  # exec(decoupled=True)
        (1, None, "bls_traced_decoupled", None),
    ]
    assert _stamps(entries, 2) == _stamps(entries, 3) == CHILD  # no INFER_RESPONSE_COMPLETE
    caller, _, last = trace_rows(entries)
    assert caller["HTTP_SEND_END"] < last["REQUEST_END"]  # it ended after the answer was sent
