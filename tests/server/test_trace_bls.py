"""BLS calls in traces, on our server alone (``test_conformance_trace_bls.py`` compares them
with real Triton's): a call made with ``trace=request.trace()`` is a child of the calling
request's trace, written first; a call without it, or made by an untraced request, is not
traced. The caller runs in a stub process and in the server's process."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.peers import REPO_ROOT
from tests.integration.test_conformance_trace import _http, _wait_for
from workbench.server.hosting import Server

pytestmark = pytest.mark.integration

ASSETS = REPO_ROOT / "tests" / "assets"
IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'
BODY = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]}
CHILD = [
    "REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
]  # fmt: skip


def _repository(root: Path, in_process: bool) -> Path:
    shutil.copytree(ASSETS / "conformance_repo" / "add_one", root / "add_one")
    shutil.copytree(ASSETS / "trace_bls_repo" / "bls_traced", root / "bls_traced")
    if in_process:
        config = root / "bls_traced" / "config.pbtxt"
        config.write_text(config.read_text() + IN_PROCESS)
    return root


def _stamps(entries: list[dict[str, Any]], trace_id: int) -> list[str]:
    return [
        e["timestamps"][0]["name"] for e in entries if e["id"] == trace_id and "timestamps" in e
    ]


@pytest.mark.parametrize("in_process", [False, True], ids=["stub", "in_process"])
def test_a_bls_call_with_the_requests_trace_is_its_child(tmp_path: Path, in_process: bool) -> None:
    trace_file = tmp_path / "trace.json"
    server = Server(
        _repository(tmp_path / "repo", in_process),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        trace_config=[f"triton,file={trace_file}", "level=TIMESTAMPS", "rate=2",
                      "triton,log-frequency=1"],
    )  # fmt: skip
    with server:
        for request_id in ("1", "2", "3", "4"):  # rate 2: two of them are traced
            status, _ = _http(server.http_port, "POST", "/v2/models/bls_traced/infer",
                              {**BODY, "id": request_id})  # fmt: skip
            assert status == 200
        files = [_wait_for(tmp_path / f"trace.json.{i}") for i in range(2)]
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
