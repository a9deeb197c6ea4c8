"""Tracing side by side: real Triton 2.51 and the embedded server, the same requests to both.

Each pair of servers serves its own copy of a small repository (``add_one`` and
``fails_on_negative`` from ``conformance_repo``, the ``ens_diamond`` ensemble and its three
steps from ``scheduling_repo``), with ``--trace-config triton,file=<its folder>/trace.json``:

- settings: a sequence of trace-setting requests (global and per model, over HTTP and gRPC,
  valid and not) must get the same status and answer, the file path aside;
- trace files: with ``log-frequency=1`` every request's trace lands in its own indexed file;
  the files must have the same names, and each the same traces: the same model headers
  (``parent_id`` of ensemble steps included) and timestamp names per trace, and, at level
  TENSORS, the same tensor entries. The timestamps must be in the order a request lives
  them. The order of entries in a file is not compared: Triton writes each activity when it
  is reported, which races between its threads (its gRPC front end's land before or after
  the core's from one run to the next);
- count, rate and rotation: which requests are traced, which file each lands in, and what
  the files hold once both servers have stopped; and ``workbench.bench.trace`` reads the
  files real Triton wrote.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.integration.peers import REPO_ROOT, Peers, TritonServerProcess, gather_models
from tests.integration.trace_cases import traced_pair, wait_for_trace_file
from workbench.bench.trace import read_trace_file, trace_files, trace_rows
from workbench.bench.trace_report import TraceReport
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

ASSETS = REPO_ROOT / "tests" / "assets"
MODELS = {
    "add_one": ASSETS / "conformance_repo",
    "fails_on_negative": ASSETS / "conformance_repo",
    "ens_diamond": ASSETS / "scheduling_repo",
    "vec_add_one": ASSETS / "scheduling_repo",
    "vec_times_two": ASSETS / "scheduling_repo",
    "vec_sum_pair": ASSETS / "scheduling_repo",
}
#: the order a request lives its timestamps (those it has)
LIFE = (
    "HTTP_RECV_START", "HTTP_RECV_END", "GRPC_WAITREAD_END", "REQUEST_START", "QUEUE_START",
    "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END", "REQUEST_END",
)  # fmt: skip


def _pair(peers: Peers, workdir: Path, flags: list[str]) -> Any:
    """Both servers serving ``MODELS`` with ``flags`` (``trace_cases.traced_pair``)."""
    return traced_pair(peers, workdir, lambda folder: gather_models(MODELS, folder), flags=flags)


def _http(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body)
        connection.request(method, path, body=data)
        reply = connection.getresponse()
        raw = reply.read()
    finally:
        connection.close()
    try:
        return reply.status, json.loads(raw)
    except ValueError:
        return reply.status, raw.decode()


def _masked(value: Any, trace_file: Path) -> Any:
    if isinstance(value, dict):
        return {k: _masked(v, trace_file) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_masked(v, trace_file) for v in value)
    return "<file>" if value == str(trace_file) else value


# -- settings ------------------------------------------------------------------------------------
V = pb.TraceSettingRequest.SettingValue
MODEL = "/v2/models/add_one/trace/setting"
GLOBAL = "/v2/trace/setting"
#: (name, HTTP (method, path, body) or gRPC TraceSettingRequest), run in this order
SETTING_STEPS: list[tuple[str, Any]] = [
    ("get", ("GET", GLOBAL, None)),
    ("post_empty_object", ("POST", GLOBAL, {})),
    ("post_not_an_object", ("POST", GLOBAL, b"[1]")),
    ("post_empty_body", ("POST", GLOBAL, b"")),
    ("file_cannot_change", ("POST", GLOBAL, {"trace_file": "/tmp/elsewhere.json"})),
    ("file_cannot_be_cleared", ("POST", GLOBAL, {"trace_file": None})),
    ("level_not_a_list", ("POST", GLOBAL, {"trace_level": "TIMESTAMPS"})),
    ("level_not_strings", ("POST", GLOBAL, {"trace_level": [1]})),
    ("level_unknown_is_ignored", ("POST", GLOBAL, {"trace_level": ["BOGUS"]})),
    ("level_empty_list_keeps", ("POST", GLOBAL, {"trace_level": []})),
    ("level_off_with_another", ("POST", GLOBAL, {"trace_level": ["OFF", "TIMESTAMPS"]})),
    ("rate_not_a_string", ("POST", GLOBAL, {"trace_rate": 5})),
    ("rate_not_a_number", ("POST", GLOBAL, {"trace_rate": "abc"})),
    ("rate_out_of_range", ("POST", GLOBAL, {"trace_rate": "99999999999"})),
    ("rate_read_as_stoi", ("POST", GLOBAL, {"trace_rate": " 12abc"})),
    ("rate_negative_wraps", ("POST", GLOBAL, {"trace_rate": "-1"})),
    ("rate_zero_while_off", ("POST", GLOBAL, {"trace_rate": "0"})),
    ("count_below_minus_one", ("POST", GLOBAL, {"trace_count": "-2"})),
    ("count_not_a_number", ("POST", GLOBAL, {"trace_count": "abc"})),
    ("count_out_of_range", ("POST", GLOBAL, {"trace_count": "3000000000"})),
    ("log_frequency_not_a_number", ("POST", GLOBAL, {"log_frequency": "x"})),
    ("log_frequency_negative_wraps", ("POST", GLOBAL, {"log_frequency": "-1"})),
    ("on_with_rate_zero", ("POST", GLOBAL, {"trace_level": ["TIMESTAMPS"], "trace_rate": "0"})),
    ("on_with_count_zero", ("POST", GLOBAL, {"trace_level": ["TIMESTAMPS"], "trace_count": "0"})),
    ("clear_all", ("POST", GLOBAL, dict.fromkeys(("trace_level", "trace_rate",
                                                   "trace_count", "log_frequency")))),
    ("on_both_levels", ("POST", GLOBAL, {"trace_level": ["TIMESTAMPS", "TENSORS"],
                                         "trace_rate": "1"})),
    ("model_follows_global", ("GET", MODEL, None)),
    ("model_sets_rate", ("POST", MODEL, {"trace_rate": "2"})),
    ("global_changes_count", ("POST", GLOBAL, {"trace_rate": "9", "trace_count": "5"})),
    ("model_keeps_rate_takes_count", ("GET", MODEL, None)),
    ("model_clears_rate", ("POST", MODEL, {"trace_rate": None})),
    ("model_follows_global_again", ("GET", MODEL, None)),
    ("unknown_model", ("GET", "/v2/models/nope/trace/setting", None)),
    ("unknown_model_post", ("POST", "/v2/models/nope/trace/setting", {"trace_rate": "2"})),
    ("versioned_path", ("GET", "/v2/models/add_one/versions/1/trace/setting", None)),
    ("method_not_allowed", ("PUT", GLOBAL, None)),
    ("off", ("POST", GLOBAL, {"trace_level": ["OFF"], "trace_count": None})),
    ("unknown_fields_ignored", ("POST", GLOBAL, {"unknown": 1, "trace_mode": "opentelemetry"})),
    ("grpc_get", pb.TraceSettingRequest()),
    ("grpc_file", pb.TraceSettingRequest(settings={"trace_file": V(value=["x"])})),
    ("grpc_level_off_with_another",
     pb.TraceSettingRequest(settings={"trace_level": V(value=["OFF", "TIMESTAMPS"])})),
    ("grpc_two_rates", pb.TraceSettingRequest(settings={"trace_rate": V(value=["1", "2"])})),
    ("grpc_rate_not_a_number", pb.TraceSettingRequest(settings={"trace_rate": V(value=["a"])})),
    ("grpc_count_below_minus_one",
     pb.TraceSettingRequest(settings={"trace_count": V(value=["-2"])})),
    ("grpc_count_out_of_range",
     pb.TraceSettingRequest(settings={"trace_count": V(value=["99999999999"])})),
    ("grpc_two_log_frequencies",
     pb.TraceSettingRequest(settings={"log_frequency": V(value=["1", "2"])})),
    ("grpc_on", pb.TraceSettingRequest(settings={"trace_level": V(value=["TIMESTAMPS"]),
                                                 "trace_rate": V(value=["3"])})),
    ("grpc_model_count",
     pb.TraceSettingRequest(model_name="add_one", settings={"trace_count": V(value=["7"])})),
    ("grpc_model_clears_count",
     pb.TraceSettingRequest(model_name="add_one", settings={"trace_count": V()})),
    ("grpc_unknown_model", pb.TraceSettingRequest(model_name="nope")),
    ("grpc_clear", pb.TraceSettingRequest(settings={"trace_level": V(), "trace_rate": V()})),
]  # fmt: skip


def _grpc_setting(address: str, request: pb.TraceSettingRequest) -> tuple[str, Any]:
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(address))
    try:
        answer = stub.TraceSetting(request, timeout=30)
    except grpc.RpcError as error:
        failure: Any = error
        return failure.code().name, failure.details()
    return "OK", {name: list(value.value) for name, value in answer.settings.items()}


def _run_steps(port: int, address: str, trace_file: Path) -> dict[str, Any]:
    answers = {}
    for name, step in SETTING_STEPS:
        if isinstance(step, pb.TraceSettingRequest):
            answer: Any = _grpc_setting(address, step)
        else:
            answer = _http(port, *step)
        answers[name] = _masked(answer, trace_file)
    return answers


@pytest.fixture(scope="module")
def setting_answers(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    """Each step's answer from real Triton and from ours."""
    with _pair(peers, tmp_path_factory.mktemp("trace_settings"), []) as pair:
        sides = [_run_steps(port, address, file) for port, address, file in pair]
    return {name: [side[name] for side in sides] for name, _ in SETTING_STEPS}


@pytest.mark.parametrize("step", [name for name, _ in SETTING_STEPS])
def test_trace_settings_answer_like_real_triton(
    step: str, setting_answers: dict[str, list[Any]]
) -> None:
    real, ours = setting_answers[step]
    assert ours == real


def test_tracing_without_a_trace_file_is_refused_like_real_triton(
    real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    """The shared servers have no trace file: turning tracing on is an invalid setting."""
    answers = [
        _http(server.http_port, "POST", GLOBAL, {"trace_level": ["TIMESTAMPS"]})
        for server in (real_triton, embedded_server)
    ]
    assert answers[1] == answers[0]
    assert answers[0] == (
        400,
        {"error": "Attempting to set invalid trace setting :trace file name is not given"},
    )


# -- the trace files -----------------------------------------------------------------------------
ROW16 = [0.5, 1e-07, 3.14159265, -2.0, 100000.0, 1234567.0, 0.0, 1.0] * 2


def _infer_http(model: str, request_id: str, name: str, values: list[float]) -> Callable[..., Any]:
    tensor = {"name": name, "shape": [1, len(values)], "datatype": "FP32", "data": values}
    body = {"id": request_id, "inputs": [tensor]}
    return lambda port, address: _http(port, "POST", f"/v2/models/{model}/infer", body)[0]


def _infer_grpc(model: str, request_id: str, name: str, width: int) -> Callable[..., Any]:
    def call(port: int, address: str) -> Any:
        client = grpcclient.InferenceServerClient(address)
        tensor = grpcclient.InferInput(name, [1, width], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, width), np.float32))
        return client.infer(model, [tensor], request_id=request_id).get_response().id

    return call


def _set(path: str, body: dict[str, Any]) -> Callable[..., Any]:
    return lambda port, address: _http(port, "POST", path, body)[0]


#: (what is traced, the calls that trace it); each writes the next indexed file
TRACED = [
    ("http_python_model", [_infer_http("add_one", "http-1", "INPUT0", [0.0] * 16)]),
    ("http_ensemble", [_infer_http("ens_diamond", "ens-1", "IN", [0.0] * 4)]),
    ("grpc_python_model", [_infer_grpc("add_one", "grpc-1", "INPUT0", 16)]),
    ("grpc_ensemble", [_infer_grpc("ens_diamond", "grpc-ens", "IN", 4)]),
    ("http_failing_model", [_infer_http("fails_on_negative", "fails", "INPUT0", [-1.0, 2.0])]),
    ("tensors", [
        _set(MODEL, {"trace_level": ["TIMESTAMPS", "TENSORS"]}),
        _infer_http("add_one", "tensors", "INPUT0", ROW16),
        _set(MODEL, {"trace_level": None}),
    ]),
]  # fmt: skip


def _structure(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """What must match: per trace (ids numbered in order), its header and timestamp names;
    the tensor entries."""
    rows = trace_rows(entries)
    rank = {row["id"]: index for index, row in enumerate(rows, 1)}
    traces = [
        {
            "trace": rank[row["id"]],
            "parent": rank.get(row.get("parent_id") or 0, 0),
            "model": (row.get("model_name"), row.get("model_version")),
            "request_id": row.get("request_id"),
            "timestamps": sorted(
                e["timestamps"][0]["name"]
                for e in entries
                if e.get("id") == row["id"] and "timestamps" in e
            ),
        }
        for row in rows
    ]
    tensors = sorted(
        (rank[e["id"]], e["activity"], json.dumps(e["tensor"], sort_keys=True))
        for e in entries
        if "activity" in e
    )
    return {"traces": traces, "tensors": tensors}


def _assert_lived_in_order(entries: list[dict[str, Any]]) -> None:
    rows = {row["id"]: row for row in trace_rows(entries)}
    for row in rows.values():
        times = [row[name] for name in LIFE if name in row]
        assert times == sorted(times), row
        for first, then in (
            ("HTTP_SEND_START", "HTTP_SEND_END"),
            ("GRPC_SEND_START", "GRPC_SEND_END"),
        ):
            if first in row:
                assert row[first] <= row[then], row
        parent = rows.get(row.get("parent_id") or 0)
        if parent is not None:  # an ensemble step runs within its ensemble's request
            assert parent["REQUEST_START"] <= row["REQUEST_START"], (parent, row)
            assert row["REQUEST_END"] <= parent["REQUEST_END"], (parent, row)


@pytest.fixture(scope="module")
def traced_files(
    peers: Peers, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[tuple[str, list[dict[str, Any]]]]]:
    """For each case of TRACED: the file each server wrote (name, entries)."""
    flags = ["level=TIMESTAMPS", "rate=1", "triton,log-frequency=1"]
    found: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {name: [] for name, _ in TRACED}
    with _pair(peers, tmp_path_factory.mktemp("trace_files"), flags) as pair:
        for port, address, base in pair:
            for index, (name, calls) in enumerate(TRACED):
                for call in calls:
                    call(port, address)
                path = base.with_name(f"{base.name}.{index}")
                found[name].append((path.name, wait_for_trace_file(path)))
    return found


@pytest.mark.parametrize("case", [name for name, _ in TRACED])
def test_trace_file_has_tritons_traces(
    case: str, traced_files: dict[str, list[tuple[str, list[dict[str, Any]]]]]
) -> None:
    (real_name, real), (our_name, ours) = traced_files[case]
    assert our_name == real_name
    assert _structure(ours) == _structure(real)
    _assert_lived_in_order(real)
    _assert_lived_in_order(ours)


# -- count, rate, rotation, and the files once the servers stop ---------------------------------
def _add_one(request_id: str) -> Callable[..., Any]:
    return _infer_http("add_one", request_id, "INPUT0", [0.0] * 16)


def _settle(port: int, address: str) -> None:
    time.sleep(0.3)  # the last reply is in; its trace is written just after


#: each step runs on both servers; comments say what Triton does
SAMPLING_STEPS: list[Callable[..., Any]] = [
    # every request, at most 2: r0 and r1 go to trace.json.0 once both are done
    _set(MODEL, {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "2"}),
    *[_add_one(f"r{i}") for i in range(3)],
    _settle,
    # a new setting counts again: every 2nd request, at most 2 (r4, r6); never written at once,
    # since 4 requests were counted for 2 traces
    _set(MODEL, {"trace_rate": "2", "trace_count": "2"}),
    *[_add_one(f"r{i}") for i in range(3, 8)],
    _settle,
    # the model follows the global setting again: its replaced setting writes r4, r6 into
    # trace.json itself
    _set(MODEL, {"trace_level": None, "trace_rate": None, "trace_count": None}),
    # globally, every request, written by twos: g0, g1 to trace.json.1; g2 waits for the stop,
    # and then goes to trace.json.2
    _set(GLOBAL, {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "2"}),
    *[_add_one(f"g{i}") for i in range(3)],
    _settle,
]


def _traced_ids(entries: list[dict[str, Any]]) -> list[str]:
    return sorted(row.get("request_id", "") for row in trace_rows(entries))


@pytest.mark.slow
def test_count_rate_and_rotation_write_the_files_triton_writes(
    peers: Peers, tmp_path: Path
) -> None:
    counts = []
    with _pair(peers, tmp_path, []) as pair:
        for port, address, _ in pair:
            for step in SAMPLING_STEPS[:5]:
                step(port, address)
            counts.append(_http(port, "GET", MODEL)[1]["trace_count"])
            for step in SAMPLING_STEPS[5:]:
                step(port, address)
    assert counts == ["0", "0"]  # the count counts down to what is left
    written = [
        {path.name: _traced_ids(read_trace_file(path)) for path in trace_files(base)}
        for _, _, base in pair
    ]
    assert written[1] == written[0]
    assert written[0] == {
        "trace.json": ["r4", "r6"],
        "trace.json.0": ["r0", "r1"],
        "trace.json.1": ["g0", "g1"],
        "trace.json.2": ["g2"],
    }
    for _, _, base in pair:  # closed at the stop: a whole JSON array
        assert isinstance(json.loads(base.read_text()), list)
    _check_reader_on(pair[0][2], pair[1][2])


def _check_reader_on(real_file: Path, our_file: Path) -> None:
    """The notebook's report reads the files real Triton wrote as it reads ours."""
    reports = [TraceReport.from_files(base) for base in (real_file, our_file)]
    traces = [report.traces for report in reports]
    assert list(traces[0].columns) == list(traces[1].columns)
    assert sorted(traces[0]["request_id"]) == sorted(traces[1]["request_id"])
    summaries = [report.summary_rows() for report in reports]
    assert [s["traces"] for s in summaries[0]] == [s["traces"] for s in summaries[1]] == [7]
    spans = reports[0].spans
    assert set(spans["span"]) == {
        "receive", "request", "queue", "compute_input", "compute_infer", "compute_output", "send",
    }  # fmt: skip
    assert len(reports[0].figure.data) == len(reports[1].figure.data)
