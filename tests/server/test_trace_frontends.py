"""The front ends' part of a trace, over a fake core that reports as the real one does."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient

from tests.server.conftest import serve, serve_with_uvicorn
from tests.server.fake_core import FakeCore
from tests.server.grpc.served import serve_grpc
from workbench.core.request import InferRequest, InferResponse
from workbench.core.statistics import RequestTimes
from workbench.core.trace import TraceLevel
from workbench.core.trace_settings import TraceManager, TraceOptions
from workbench.server.http import create_app

pytestmark = pytest.mark.integration

BODY = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [0] * 16}]}
CORE = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]


class ReportingCore(FakeCore):
    """Reports each traced request, as ``BackendModel`` does (no execution: no COMPUTE_*)."""

    async def infer(self, request: InferRequest) -> InferResponse:
        response = await super().infer(request)
        if request.trace is not None:
            request.trace.report_request(request.model_name, 1, request.id, RequestTimes())
        return response


def tracing(tmp_path: Path, rate: int = 1) -> TraceManager:
    """Every ``rate``-th request traced, each trace in its own file."""
    options = TraceOptions(TraceLevel.TIMESTAMPS, rate, -1, 1, str(tmp_path / "trace.json"))
    return TraceManager(options)


def stamps(path: Path) -> list[str]:
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.01)
    return [e["timestamps"][0]["name"] for e in json.loads(path.read_text()) if "timestamps" in e]


def test_http_request_is_traced_from_its_arrival_to_its_send(tmp_path: Path) -> None:
    app = create_app(ReportingCore(), tracer=tracing(tmp_path))  # type: ignore[arg-type]
    for url in serve(app):
        assert requests.post(f"{url}/v2/models/add_one/infer", json=BODY, timeout=10).ok
    assert stamps(tmp_path / "trace.json.0") == [
        "HTTP_RECV_START", "HTTP_RECV_END", *CORE, "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START",
        "HTTP_SEND_END",
    ]  # fmt: skip


def test_a_failed_request_is_traced_too(tmp_path: Path) -> None:
    app = create_app(ReportingCore(), tracer=tracing(tmp_path))  # type: ignore[arg-type]
    for url in serve(app):
        reply = requests.post(f"{url}/v2/models/nope/infer", json=BODY, timeout=10)
        assert reply.status_code == 404
    # refused before any model saw it: only the front end's timestamps, as in Triton
    assert stamps(tmp_path / "trace.json.0") == [
        "HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END",
    ]  # fmt: skip


def test_under_another_asgi_server_the_send_is_traced_but_not_the_receive(tmp_path: Path) -> None:
    import socket

    app = create_app(ReportingCore(), tracer=tracing(tmp_path))  # type: ignore[arg-type]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        for url in serve_with_uvicorn(app, sock):
            assert requests.post(f"{url}/v2/models/add_one/infer", json=BODY, timeout=10).ok
    assert stamps(tmp_path / "trace.json.0") == [
        *CORE, "INFER_RESPONSE_COMPLETE", "HTTP_SEND_START", "HTTP_SEND_END",
    ]  # fmt: skip


def test_only_every_rate_th_request_is_traced(tmp_path: Path) -> None:
    app = create_app(ReportingCore(), tracer=tracing(tmp_path, rate=2))  # type: ignore[arg-type]
    for url in serve(app):
        for index in range(4):
            body = {**BODY, "id": f"r{index}"}
            assert requests.post(f"{url}/v2/models/add_one/infer", json=body, timeout=10).ok
    stamps(tmp_path / "trace.json.1")
    written = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("trace.json.*"))]
    assert [[e["request_id"] for e in f if "request_id" in e] for f in written] == [["r1"], ["r3"]]


def test_grpc_call_is_traced_with_its_front_end_timestamps_after_the_cores(
    tmp_path: Path,
) -> None:
    for server in serve_grpc(core=ReportingCore(), tracer=tracing(tmp_path)):
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
        server.client().infer("add_one", [tensor])
        assert stamps(tmp_path / "trace.json.0") == [
            *CORE, "GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE",
            "GRPC_SEND_START", "GRPC_SEND_END",
        ]  # fmt: skip


def test_tracing_off_leaves_requests_untraced(tmp_path: Path) -> None:
    tracer = TraceManager(TraceOptions(file=str(tmp_path / "trace.json"), rate=1))
    app = create_app(ReportingCore(), tracer=tracer)  # type: ignore[arg-type]
    for url in serve(app):
        assert requests.post(f"{url}/v2/models/add_one/infer", json=BODY, timeout=10).ok
    assert not tracer.enabled and list(tmp_path.iterdir()) == []
