"""The opentelemetry trace mode side by side: real Triton 2.51 and the embedded server, each
exporting to its own OTLP/HTTP receiver on loopback, the same requests to both.

- spans: for each traced request (HTTP and gRPC to a python model, an ensemble, a failing
  model, a request propagating a W3C ``traceparent``) the same span tree: names, kinds,
  attributes (``triton.*``, trace ids included), event names, nesting (ensemble steps under the
  ensemble's span), events in time order and inside their span's time (the root span's front
  end events aside: the request was received before it was sampled), the same resource attributes
  (``service.name``, ``resource=`` settings) and scope;
- the trace setting API: the same answers over HTTP (key order included) and gRPC, refusals
  included, the receivers' urls aside.

tritonserver 2.51's C++ exporter sends OTLP/HTTP JSON; ours sends protobuf (the Python SDK's
only OTLP/HTTP encoding): the receiver reads both.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.integration.peers import REPO_ROOT, Peers, TritonServerProcess, gather_models
from tests.server.otlp_receiver import OtlpReceiver, ReceivedSpan, roots, tree
from workbench.server.hosting import Server

pytest.importorskip("opentelemetry.sdk")
pytestmark = [pytest.mark.integration, pytest.mark.conformance]

ASSETS = REPO_ROOT / "tests" / "assets"
MODELS = {
    "add_one": ASSETS / "conformance_repo",
    "fails_on_negative": ASSETS / "conformance_repo",
    "trace_context": ASSETS / "conformance_repo",
    "ens_diamond": ASSETS / "scheduling_repo",
    "vec_add_one": ASSETS / "scheduling_repo",
    "vec_times_two": ASSETS / "scheduling_repo",
    "vec_sum_pair": ASSETS / "scheduling_repo",
}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
#: another parent: a side's spans of a call are told apart by their new trace id
OTHER_PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#: a request to one side: (HTTP port, gRPC address) -> its answer
Call = Callable[[int, str], Any]


def _flags(url: str) -> list[str]:
    return [
        "mode=opentelemetry",
        f"opentelemetry,url={url}",
        "opentelemetry,resource=deployment=conformance",
        "opentelemetry,bsp_schedule_delay=20",
        "level=TIMESTAMPS",
        "rate=1",
    ]


def _http(port: int, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = None if body is None else json.dumps(body)
        connection.request(method, path, body=data, headers=headers)
        reply = connection.getresponse()
        raw = reply.read()
    finally:
        connection.close()
    # object_pairs_hook: the key order is compared too
    return reply.status, json.loads(raw, object_pairs_hook=list)


def _infer_http(
    model: str, request_id: str, name: str, values: list[float], **headers: str
) -> Call:
    tensor = {"name": name, "shape": [1, len(values)], "datatype": "FP32", "data": values}
    body = {"id": request_id, "inputs": [tensor]}
    path = f"/v2/models/{model}/infer"
    return lambda port, address: _http(port, "POST", path, body, **headers)[0]


def _model_context(**headers: str) -> Call:
    """``trace_context``'s answer: the context its python model was given."""
    tensor = {"name": "X", "shape": [1], "datatype": "FP32", "data": [1.0]}
    path = "/v2/models/trace_context/infer"

    def call(port: int, address: str) -> Any:
        status, answer = _http(port, "POST", path, {"inputs": [tensor]}, **headers)
        assert status == 200, answer
        outputs = dict(answer)["outputs"]
        return dict(outputs[0])["data"][0]

    return call


def _infer_grpc(model: str, request_id: str, name: str, width: int) -> Call:
    def call(port: int, address: str) -> Any:
        client = grpcclient.InferenceServerClient(address)
        tensor = grpcclient.InferInput(name, [1, width], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, width), np.float32))
        return client.infer(model, [tensor], request_id=request_id).get_response().id

    return call


#: (what is traced, the call, the spans of its trace)
TRACED: list[tuple[str, Call, int]] = [
    ("http_python_model", _infer_http("add_one", "http-1", "INPUT0", [0.0] * 16), 3),
    ("http_ensemble", _infer_http("ens_diamond", "ens-1", "IN", [0.0] * 4), 8),
    ("grpc_python_model", _infer_grpc("add_one", "grpc-1", "INPUT0", 16), 3),
    ("http_failing_model", _infer_http("fails_on_negative", "fails", "INPUT0", [-1.0, 2.0]), 3),
    ("propagated_context",
     _infer_http("add_one", "prop", "INPUT0", [0.0] * 16, traceparent=TRACEPARENT), 3),
    ("model_context", _model_context(), 3),
    ("propagated_model_context", _model_context(traceparent=OTHER_PARENT), 3),
]  # fmt: skip

V = pb.TraceSettingRequest.SettingValue
GLOBAL = "/v2/trace/setting"
#: trace setting steps after the traced requests, in this order
SETTING_STEPS: list[tuple[str, Any]] = [
    ("get", ("GET", GLOBAL, None)),
    ("model_get", ("GET", "/v2/models/add_one/trace/setting", None)),
    ("rate_zero", ("POST", GLOBAL, {"trace_rate": "0"})),
    ("count_zero", ("POST", GLOBAL, {"trace_count": "0"})),
    ("file", ("POST", GLOBAL, {"trace_file": "/tmp/x.json"})),
    ("log_frequency_is_not_shown", ("POST", GLOBAL, {"log_frequency": "3"})),
    ("tensors", ("POST", GLOBAL, {"trace_level": ["TENSORS"]})),
    ("model_count", ("POST", "/v2/models/add_one/trace/setting", {"trace_count": "2"})),
    ("grpc_get", pb.TraceSettingRequest()),
    ("grpc_model_get", pb.TraceSettingRequest(model_name="add_one")),
    ("grpc_rate", pb.TraceSettingRequest(settings={"trace_rate": V(value=["5"])})),
    ("off", ("POST", GLOBAL, {"trace_level": ["OFF"]})),
]  # fmt: skip


class Side:
    """One server and its receiver."""

    def __init__(self, receiver: OtlpReceiver, http_port: int, grpc_address: str) -> None:
        self.receiver = receiver
        self.http_port = http_port
        self.grpc_address = grpc_address
        self.traces: dict[str, list[ReceivedSpan]] = {}
        #: what each traced call answered
        self.answers: dict[str, Any] = {}
        self.settings: dict[str, Any] = {}

    def trace(self, name: str, call: Call, spans: int) -> None:
        """Send one request and keep the spans of its trace (a new trace id)."""
        known = {s.trace_id for s in self.receiver.spans}
        self.answers[name] = call(self.http_port, self.grpc_address)
        deadline = time.monotonic() + 30
        while True:
            new = [s for s in self.receiver.spans if s.trace_id not in known]
            if len(new) >= spans:
                self.traces[name] = new
                return
            assert time.monotonic() < deadline, f"{name}: {len(new)} spans of {spans}"
            time.sleep(0.02)

    def setting(self, step: Any) -> Any:
        if not isinstance(step, pb.TraceSettingRequest):
            status, answer = _http(self.http_port, *step)
            return status, _masked(answer, self.receiver.url)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(self.grpc_address))
        try:
            reply = stub.TraceSetting(step, timeout=30)
        except grpc.RpcError as error:
            failure: Any = error
            return failure.code().name, failure.details()
        values = {name: list(value.value) for name, value in reply.settings.items()}
        return "OK", _masked(values, self.receiver.url)


def _masked(value: Any, url: str) -> Any:
    if isinstance(value, dict):
        return {k: _masked(v, url) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_masked(v, url) for v in value)
    return "<url>" if value == url else value


@pytest.fixture(scope="module")
def sides(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Side]]:
    """Real Triton's side, then ours, after the traced requests and setting steps ran on both."""
    workdir = tmp_path_factory.mktemp("trace_otel")
    with ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        receivers = [stack.enter_context(OtlpReceiver()) for _ in range(2)]
        real = TritonServerProcess(
            peers,
            gather_models(MODELS, workdir / "real"),
            log_path=workdir / "tritonserver.log",
            extra_args=[a for f in _flags(receivers[0].url) for a in ("--trace-config", f)],
        )
        ours = Server(
            gather_models(MODELS, workdir / "ours"),
            http_port=0,
            grpc_port=0,
            metrics_port=0,
            model_control_mode="explicit",
            load_model=["*"],
            trace_config=_flags(receivers[1].url),
        )
        starting = pool.submit(real.start)
        stack.callback(real.stop)
        ours.start()
        stack.callback(ours.stop)
        starting.result()
        pair = [
            Side(receivers[0], real.http_port, real.grpc_url),
            Side(receivers[1], ours.http_port, ours.grpc_url),
        ]
        for side in pair:
            for name, call, spans in TRACED:
                side.trace(name, call, spans)
            for name, step in SETTING_STEPS:
                side.settings[name] = side.setting(step)
        yield pair


@pytest.mark.parametrize("name", [name for name, _, _ in TRACED])
def test_spans_are_those_real_triton_sends(name: str, sides: list[Side]) -> None:
    real, ours = (side.traces[name] for side in sides)
    shapes = []
    for spans in (real, ours):
        (root,) = roots(spans)
        shapes.append(tree(spans, root))
        for span in spans:
            assert span.start_ns <= span.end_ns
            assert [ns for _, ns in span.events] == sorted(ns for _, ns in span.events)
            if span is not root:  # the root's front-end events begin before it (on Triton too)
                assert all(span.start_ns <= ns <= span.end_ns for _, ns in span.events), span
        assert len({s.trace_id for s in spans}) == 1
    assert shapes[1] == shapes[0]


def test_a_propagated_context_gives_the_same_trace_and_parent(sides: list[Side]) -> None:
    parents = []
    for side in sides:
        (root,) = roots(side.traces["propagated_context"])
        parents.append((root.trace_id, root.parent_id))
    assert parents[1] == parents[0] == ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")


@pytest.mark.parametrize("name", ["model_context", "propagated_model_context"])
def test_a_python_model_gets_its_model_spans_context(name: str, sides: list[Side]) -> None:
    # request.trace().get_context(): Triton 2.51 gives {"traceparent": ...} naming the trace and
    # the span of the model the request runs in (the one named after the model).
    forms = []
    for side in sides:
        context = json.loads(side.answers[name])
        version, trace_id, span_id, flags = context["traceparent"].split("-")
        (model_span,) = [span for span in side.traces[name] if span.name == "trace_context"]
        assert (trace_id, span_id) == (model_span.trace_id, model_span.span_id)
        forms.append((list(context), version, flags, len(trace_id), len(span_id)))
        if name.startswith("propagated"):
            assert trace_id == OTHER_PARENT.split("-")[1]
    assert forms[1] == forms[0] == (["traceparent"], "00", "01", 32, 16)
    assert sides[1].answers[name].startswith('{"traceparent":"00-')  # Triton's compact JSON


def test_resource_and_scope_are_real_tritons(sides: list[Side]) -> None:
    def identity(spans: list[ReceivedSpan]) -> Any:
        own = {k: v for k, v in spans[0].resource.items() if not k.startswith("telemetry.")}
        return own, {s.scope for s in spans}

    real, ours = (identity(side.traces["http_python_model"]) for side in sides)
    assert ours == real
    assert real == (
        {"service.name": "triton-inference-server", "deployment": "conformance"},
        {"triton-server"},
    )


@pytest.mark.parametrize("step", [name for name, _ in SETTING_STEPS])
def test_trace_settings_answer_like_real_triton(step: str, sides: list[Side]) -> None:
    real, ours = (side.settings[step] for side in sides)
    assert ours == real
