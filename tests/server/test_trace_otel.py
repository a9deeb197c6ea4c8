"""The embedded server in opentelemetry trace mode: spans over OTLP/HTTP to a loopback receiver,
the trace setting API as tritonserver 2.51 answers in that mode, and its refusals.

The server serves ``add_one`` and the ``ens_diamond`` ensemble with its three steps (python
models); ``Server(trace_config=[...])`` takes the flags ``workbench serve --trace-config`` takes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.integration.peers import gather_models
from tests.server.otlp_receiver import OtlpReceiver, ReceivedSpan, children, roots, tree
from workbench.server.hosting import Server

pytest.importorskip("opentelemetry.sdk")
pytestmark = pytest.mark.integration

ASSETS = Path(__file__).resolve().parents[1] / "assets"
MODELS = {
    "add_one": ASSETS / "conformance_repo",
    "ens_diamond": ASSETS / "scheduling_repo",
    "vec_add_one": ASSETS / "scheduling_repo",
    "vec_times_two": ASSETS / "scheduling_repo",
    "vec_sum_pair": ASSETS / "scheduling_repo",
}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
REQUEST = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]


def model_span(name: str, version: int, trace_id: int, parent: int, request_id: str) -> Any:
    attributes: dict[str, Any] = {
        "triton.model_name": name,
        "triton.model_version": version,
        "triton.trace_id": trace_id,
        "triton.trace_parent_id": parent,
    }
    if request_id:
        attributes["triton.request_id"] = request_id
    compute = {"name": "compute", "kind": 2, "events": COMPUTE}
    return {
        "name": name,
        "kind": 2,
        "events": REQUEST,
        "attributes": attributes,
        "children": [compute],
    }


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def server(receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(
        gather_models(MODELS, tmp_path_factory.mktemp("otel_repo")),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=["*"],
        trace_config=[
            "mode=opentelemetry",
            f"opentelemetry,url={receiver.url}",
            "opentelemetry,resource=deployment=test",
            "opentelemetry,bsp_schedule_delay=20",
            "level=TIMESTAMPS",
            "rate=1",
        ],
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def infer(server: Server, model: str, request_id: str, width: int, **headers: str) -> None:
    name = "INPUT0" if model == "add_one" else "IN"
    tensor = {"name": name, "shape": [1, width], "datatype": "FP32", "data": [0.0] * width}
    body = {"id": request_id, "inputs": [tensor]}
    url = f"http://127.0.0.1:{server.http_port}/v2/models/{model}/infer"
    assert requests.post(url, json=body, headers=headers, timeout=60).ok


def trace_of(receiver: OtlpReceiver, request_id: str, spans: int) -> list[ReceivedSpan]:
    """The ``spans`` spans of the trace whose model spans have ``request_id``."""
    deadline = time.monotonic() + 20
    while True:
        received = list(receiver.spans)
        ids = {s.trace_id for s in received if s.attributes.get("triton.request_id") == request_id}
        found = [s for s in received if s.trace_id in ids]
        if len(found) >= spans:
            assert len(found) == spans, found
            return found
        assert time.monotonic() < deadline, f"{len(found)} spans of {spans} for {request_id}"
        time.sleep(0.02)


def setting(server: Server, body: Any = None, model: str = "") -> tuple[int, Any]:
    path = f"/v2/models/{model}/trace/setting" if model else "/v2/trace/setting"
    url = f"http://127.0.0.1:{server.http_port}{path}"
    reply = requests.post(url, json=body, timeout=30) if body is not None else requests.get(url)
    return reply.status_code, reply.json()


def test_an_http_request_is_three_spans_with_tritons_names_attributes_and_events(
    server: Server, receiver: OtlpReceiver
) -> None:
    infer(server, "add_one", "http-1", 16)
    spans = trace_of(receiver, "http-1", 3)
    (root,) = roots(spans)
    assert tree(spans, root) == {
        "name": "InferRequest",
        "kind": 2,
        "events": [
            "HTTP_RECV_START",
            "HTTP_RECV_END",
            "INFER_RESPONSE_COMPLETE",
            "HTTP_SEND_START",
            "HTTP_SEND_END",
        ],
        "children": [model_span("add_one", 1, root_trace_id(spans), 0, "http-1")],
    }
    assert root.resource["service.name"] == "triton-inference-server"
    assert root.resource["deployment"] == "test"
    assert {s.scope for s in spans} == {"triton-server"}
    assert receiver.paths[-1] == "/v1/traces"
    assert receiver.content_types[-1] == "application/x-protobuf"
    for span in spans:  # every event inside its span, in the order it was lived
        assert [ns for _, ns in span.events] == sorted(ns for _, ns in span.events)
        if span is not root:
            assert span.start_ns == span.events[0][1] and span.end_ns == span.events[-1][1]


def root_trace_id(spans: list[ReceivedSpan]) -> int:
    return min(s.attributes["triton.trace_id"] for s in spans if s.attributes)


def test_an_ensembles_steps_nest_under_the_ensembles_span(
    server: Server, receiver: OtlpReceiver
) -> None:
    infer(server, "ens_diamond", "ens-1", 4)
    spans = trace_of(receiver, "ens-1", 8)
    (root,) = roots(spans)
    (ensemble,) = children(spans, root)
    ens_id = ensemble.attributes["triton.trace_id"]
    shape = tree(spans, ensemble)
    assert {k: v for k, v in shape.items() if k != "children"} == {
        "name": "ens_diamond",
        "kind": 2,
        "events": REQUEST,  # an ensemble has no compute span
        "attributes": {
            "triton.model_name": "ens_diamond",
            "triton.model_version": 1,
            "triton.trace_id": ens_id,
            "triton.trace_parent_id": 0,
            "triton.request_id": "ens-1",
        },
    }
    steps = shape["children"]
    assert [s["name"] for s in steps] == ["vec_add_one", "vec_sum_pair", "vec_times_two"]
    for step in steps:
        step_id = step["attributes"]["triton.trace_id"]
        assert step == model_span(step["name"], 1, step_id, ens_id, "ens-1")
    # the last step starts once both others ended (its inputs are their outputs)
    by_name = {s.name: s for s in children(spans, ensemble)}
    last = by_name["vec_sum_pair"].start_ns
    assert by_name["vec_add_one"].end_ns <= last and by_name["vec_times_two"].end_ns <= last


def test_a_grpc_call_has_the_grpc_front_end_events(server: Server, receiver: OtlpReceiver) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
    client.infer("add_one", [tensor], request_id="grpc-1")
    spans = trace_of(receiver, "grpc-1", 3)
    (root,) = roots(spans)
    assert root.event_names == [
        "GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "INFER_RESPONSE_COMPLETE",
        "GRPC_SEND_START", "GRPC_SEND_END",
    ]  # fmt: skip
    assert [s.name for s in children(spans, root)] == ["add_one"]


def test_a_propagated_trace_context_is_the_parent_over_http_and_grpc(
    server: Server, receiver: OtlpReceiver
) -> None:
    infer(server, "add_one", "prop-http", 16, traceparent=TRACEPARENT)
    client = grpcclient.InferenceServerClient(server.grpc_url)
    tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
    other = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00"  # not sampled: traced
    client.infer("add_one", [tensor], request_id="prop-grpc", headers={"traceparent": other})
    for request_id, parent in (("prop-http", TRACEPARENT), ("prop-grpc", other)):
        (root,) = roots(trace_of(receiver, request_id, 3))
        assert (root.name, root.trace_id, root.parent_id) == (
            "InferRequest",
            parent.split("-")[1],
            parent.split("-")[2],
        )


def test_the_setting_api_answers_as_triton_does_in_opentelemetry_mode(
    server: Server, receiver: OtlpReceiver
) -> None:
    """No ``log_frequency`` or ``trace_file``; the mode's entries, then the ``bsp_*`` defaults
    not given (seen on tritonserver 2.51)."""
    expected = {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": "-1",
        "trace_mode": "opentelemetry",
        "url": receiver.url,
        "resource": "deployment=test",
        "bsp_schedule_delay": "20",
        "bsp_max_export_batch_size": "512",
        "bsp_max_queue_size": "2048",
    }
    status, answer = setting(server)
    assert (status, list(answer.items())) == (200, list(expected.items()))
    assert setting(server, model="add_one") == (200, expected)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
    settings = stub.TraceSetting(pb.TraceSettingRequest(), timeout=30).settings
    assert {k: list(v.value) for k, v in settings.items()} == {
        k: v if isinstance(v, list) else [v] for k, v in expected.items()
    }


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"trace_rate": "0"}, 400, "Attempting to set invalid trace setting :sample rate must be "
         "non-zero"),
        ({"trace_count": "0"}, 400, "Attempting to set invalid trace setting :"),
        ({"trace_file": "/tmp/x.json"}, 501, "trace file location can not be updated through "
         "network protocol"),
    ],
)  # fmt: skip
def test_invalid_updates_are_refused_with_tritons_text(
    server: Server, body: dict[str, str], status: int, error: str
) -> None:
    assert setting(server, body) == (status, {"error": error})


def test_log_frequency_is_kept_but_not_shown_and_tensors_level_is_accepted(
    server: Server,
) -> None:
    status, answer = setting(server, {"log_frequency": "3", "trace_level": ["TENSORS"]})
    assert status == 200 and "log_frequency" not in answer and "trace_file" not in answer
    assert answer["trace_level"] == ["TENSORS"]
    status, answer = setting(server, {"log_frequency": None, "trace_level": None})
    assert (status, answer["trace_level"]) == (200, ["TIMESTAMPS"])
