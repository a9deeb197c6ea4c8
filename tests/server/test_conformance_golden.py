"""Replay real Triton 2.51 exchanges whose answer the HTTP front end alone decides.

The captures live in ``tests/assets/conformance_golden/`` (see its README). Only cases that do
not depend on the core's own messages are replayed here, against the fake core: status,
content type and body must be exactly Triton's.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.server.conftest import RunningServer

GOLDEN = Path(__file__).parents[1] / "assets" / "conformance_golden"
CASES = [
    "health_live",
    "health_ready",
    "model_ready_add_one",
    "model_version_ready_add_one_v1",
    "error_ready_unknown_model",
    "error_unknown_path",
    "error_get_on_infer",
    "logging_settings",
    "trace_settings",
    "trace_settings_add_one",
    "error_trace_unknown_model",
    "error_trace_file_not_updatable",
    "error_trace_needs_a_file",
    "infer_add_one_json",
    "infer_add_one_versioned",
    "infer_add_one_batch_8",
    "infer_add_one_binary_output",
    "error_infer_malformed_json",
    "error_infer_data_count_mismatch",
    "error_infer_binary_data_short",
    "error_infer_header_length_beyond_body",
    "error_infer_empty_body",
]

pytestmark = pytest.mark.integration


def request_body(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, dict) and set(body) == {"base64"}:
        return base64.b64decode(body["base64"])
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def response_body(reply: requests.Response) -> Any:
    if not reply.content:
        return None
    length = reply.headers.get("inference-header-content-length")
    if length is None:
        return reply.json()
    head = reply.content[: int(length)]
    tail = reply.content[int(length) :]
    return {"json_header": json.loads(head), "binary_tail_base64": base64.b64encode(tail).decode()}


@pytest.mark.parametrize("case", CASES)
def test_front_end_answers_like_triton(running: RunningServer, case: str) -> None:
    path = GOLDEN / f"{case}.json"
    if not path.exists():
        pytest.skip("no golden capture")
    golden = json.loads(path.read_text())
    sent, expected = golden["request"], golden["response"]
    reply = requests.request(
        sent["method"],
        running.url + sent["path"],
        data=request_body(sent.get("body")),
        # requests asks for gzip by default; the captures were taken without compression
        headers={"Accept-Encoding": "identity", **(sent.get("headers") or {})},
        timeout=10,
    )
    assert reply.status_code == expected["status"]
    assert reply.headers.get("content-type") == expected["headers"].get("content-type")
    assert response_body(reply) == expected["body"]
    for header in ("inference-header-content-length", "content-length"):
        if header in expected["headers"]:
            assert reply.headers.get(header) == expected["headers"][header]
