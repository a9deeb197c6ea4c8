"""Sequence batching end to end: python accumulator models behind the embedded HTTP server."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from workbench.server.hosting import Server

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT", data_type: TYPE_INT32, dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT", data_type: TYPE_INT32, dims: [ 1 ] }},
  {{ name: "SEEN", data_type: TYPE_STRING, dims: [ 1 ] }}
]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  {strategy}
  control_input [
    {{ name: "START", control [ {{ kind: CONTROL_SEQUENCE_START, int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END", control [ {{ kind: CONTROL_SEQUENCE_END, fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY",
       control [ {{ kind: CONTROL_SEQUENCE_READY, bool_false_true: [ false, true ] }} ] }},
    {{ name: "CORRID", control [ {{ kind: CONTROL_SEQUENCE_CORRID, data_type: {corrid} }} ] }}
  ]
}}
"""

# Sums per correlation id, kept in the instance (it may live in its own process).
MODEL = """
import json
import time
import numpy as np
import triton_python_backend_utils as pb_utils


def _first(request, name):
    value = pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else value.item()


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        time.sleep(0.02)  # lets concurrent sequences meet in one execution
        responses = []
        for request in requests:
            shape = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().shape
            seen = {
                name.lower(): _first(request, name)
                for name in ("START", "END", "READY", "CORRID", "INPUT")
            }
            seen.update(
                correlation_id=request.correlation_id(), flags=request.flags(),
                requests=len(requests),
            )
            key = request.correlation_id()
            if seen["ready"]:
                if seen["start"]:
                    self.sums[key] = 0
                self.sums[key] += seen["input"]
            total = self.sums.get(key, 0) if seen["ready"] else 0
            outputs = [
                pb_utils.Tensor("OUTPUT", np.full(shape, total, np.int32)),
                pb_utils.Tensor("SEEN", np.full(shape, json.dumps(seen).encode(), object)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""

MODELS = {
    "acc_direct": {"max_batch_size": 2, "strategy": "direct { }", "corrid": "TYPE_UINT64"},
    "acc_oldest": {
        "max_batch_size": 4,
        "strategy": "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] "
        "max_queue_delay_microseconds: 1000 }",
        "corrid": "TYPE_INT64",
    },
    "acc_string": {"max_batch_size": 0, "strategy": "", "corrid": "TYPE_STRING"},
    "acc_idle": {"max_batch_size": 0, "strategy": "", "corrid": "TYPE_STRING", "idle_us": 300_000},
}
#: long enough that a busy machine never idles a sequence out by accident
IDLE_US = 10_000_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("sequence_repo")
    for name, fields in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        config = CONFIG.format(**{"name": name, "idle_us": IDLE_US, **fields})
        (root / name / "config.pbtxt").write_text(config)
        (root / name / "1" / "model.py").write_text(textwrap.dedent(MODEL))
    with Server(root, http_port=0, grpc_port=0, metrics_port=0) as running:
        yield running


def infer(server: Server, model: str, value: int, **params: Any) -> requests.Response:
    shape = [1] if MODELS[model]["max_batch_size"] == 0 else [1, 1]
    body = {
        "inputs": [{"name": "INPUT", "shape": shape, "datatype": "INT32", "data": [value]}],
        "parameters": params,
    }
    return requests.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=30)


def outputs(reply: requests.Response) -> tuple[int, dict[str, Any]]:
    assert reply.status_code == 200, reply.text
    by_name = {o["name"]: o["data"] for o in reply.json()["outputs"]}
    return by_name["OUTPUT"][0], json.loads(by_name["SEEN"][0])


def run_sequence(server: Server, model: str, key: int | str, values: list[int]) -> list[int]:
    sums = []
    for i, value in enumerate(values):
        params = {
            "sequence_id": key,
            "sequence_start": i == 0,
            "sequence_end": i == len(values) - 1,
        }
        sums.append(outputs(infer(server, model, value, **params))[0])
    return sums


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_interleaved_sequences_keep_their_sums(server: Server, model: str) -> None:
    steps = [(11, 5, True), (22, 100, True), (11, 6, False), (22, 1, False)]
    sums = [
        outputs(infer(server, model, v, sequence_id=k, sequence_start=s))[0] for k, v, s in steps
    ]
    sums.append(outputs(infer(server, model, 7, sequence_id=11, sequence_end=True))[0])
    sums.append(outputs(infer(server, model, 2, sequence_id=22, sequence_end=True))[0])
    assert sums == [5, 100, 11, 101, 18, 103]


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_concurrent_sequences_share_executions(server: Server, model: str) -> None:
    with ThreadPoolExecutor(3) as pool:
        runs = {
            key: pool.submit(run_sequence, server, model, key, [key, 1, 1, 1]) for key in (7, 8, 9)
        }
        results = {key: run.result(timeout=60) for key, run in runs.items()}
    assert results == {key: [key, key + 1, key + 2, key + 3] for key in (7, 8, 9)}


def test_control_inputs_seen_by_the_model(server: Server) -> None:
    first = outputs(infer(server, "acc_direct", 4, sequence_id=1001, sequence_start=True))[1]
    last = outputs(infer(server, "acc_direct", 5, sequence_id=1001, sequence_end=True))[1]
    assert first["start"] == 1 and first["end"] == 0.0 and first["ready"] is True
    assert first["corrid"] == 1001 and first["correlation_id"] == 1001 and first["flags"] == 1
    assert last["start"] == 0 and last["end"] == 1.0 and last["flags"] == 2


def test_string_ids(server: Server) -> None:
    assert run_sequence(server, "acc_string", "alpha", [5, 6, 7]) == [5, 11, 18]
    seen = outputs(infer(server, "acc_string", 1, sequence_id="beta", sequence_start=True))[1]
    assert seen["corrid"] == "beta" and seen["correlation_id"] == "beta"
    infer(server, "acc_string", 1, sequence_id="beta", sequence_end=True)


def test_null_request_pads_an_empty_slot(server: Server) -> None:
    outputs(infer(server, "acc_direct", 1, sequence_id=31, sequence_start=True))  # slot 0
    outputs(infer(server, "acc_direct", 1, sequence_id=32, sequence_start=True))  # slot 1
    # A request of slot 1 alone runs with a null request in slot 0 (READY false).
    total, seen = outputs(infer(server, "acc_direct", 2, sequence_id=32, sequence_end=True))
    assert total == 3 and seen["requests"] == 2
    assert outputs(infer(server, "acc_direct", 2, sequence_id=31, sequence_end=True))[0] == 3


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"sequence_start": True},
         "inference request to model 'acc_direct' must specify a non-zero or non-empty "
         "correlation ID"),
        ({"sequence_id": 0, "sequence_start": True},
         "inference request to model 'acc_direct' must specify a non-zero or non-empty "
         "correlation ID"),
        ({"sequence_id": 4242},
         "inference request for sequence 4242 to model 'acc_direct' must specify the START flag "
         "on the first request of the sequence"),
        ({"sequence_id": "abc", "sequence_start": True},
         "[request id: <id_unknown>] sequence batching control 'CORRID' data-type is 'BYTES', "
         "but model 'acc_direct' expects 'UINT64'"),
    ],
)  # fmt: skip
def test_errors(server: Server, params: dict[str, Any], error: str) -> None:
    reply = infer(server, "acc_direct", 1, **params)
    assert (reply.status_code, reply.json()) == (400, {"error": error})


def test_batch_of_two_is_refused(server: Server) -> None:
    body = {
        "inputs": [{"name": "INPUT", "shape": [2, 1], "datatype": "INT32", "data": [1, 2]}],
        "parameters": {"sequence_id": 5, "sequence_start": True},
    }
    reply = requests.post(f"{server.url}/v2/models/acc_direct/infer", json=body, timeout=30)
    assert (reply.status_code, reply.json()) == (
        400,
        {
            "error": "inference request to model 'acc_direct' must specify batch-size 1 due to "
            "requirements of sequence batcher"
        },
    )


def test_idle_sequence_is_forgotten(server: Server) -> None:
    outputs(infer(server, "acc_idle", 1, sequence_id="sleepy", sequence_start=True))
    time.sleep(0.8)  # idle limit 0.3 s
    reply = infer(server, "acc_idle", 1, sequence_id="sleepy")
    assert (reply.status_code, reply.json()) == (
        400,
        {
            "error": "inference request for sequence sleepy to model 'acc_idle' must specify "
            "the START flag on the first request of the sequence"
        },
    )


def test_statistics_count_real_requests_only(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "acc_direct" / "1").mkdir(parents=True)
    config = CONFIG.format(name="acc_direct", idle_us=IDLE_US, **MODELS["acc_direct"])
    (root / "acc_direct" / "config.pbtxt").write_text(config)
    (root / "acc_direct" / "1" / "model.py").write_text(textwrap.dedent(MODEL))
    with Server(root, http_port=0, grpc_port=0, metrics_port=0) as running:
        run_sequence(running, "acc_direct", 1, [1])  # slot 0, ended
        outputs(infer(running, "acc_direct", 1, sequence_id=2, sequence_start=True))  # slot 0
        outputs(infer(running, "acc_direct", 1, sequence_id=3, sequence_start=True))  # slot 1
        outputs(infer(running, "acc_direct", 1, sequence_id=3, sequence_end=True))  # + a null
        url = f"{running.url}/v2/models/acc_direct/stats"
        stats = requests.get(url, timeout=10).json()["model_stats"][0]
    assert stats["inference_count"] == 4 and stats["execution_count"] == 4
    assert stats["inference_stats"]["success"]["count"] == 4
    assert [b["batch_size"] for b in stats["batch_stats"]] == [1, 2]


# -- implicit state with an ONNX model (the state is carried from request to request) ---------

STATE_CONFIG = """
name: "onnx_state"
platform: "onnxruntime_onnx"
max_batch_size: 1
input [{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }]
output [{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
  state [{
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" }
  }]
}
"""


def _write_onnx_accumulator(root: Path) -> None:
    """OUTPUT = INPUT + STATE_IN; STATE_OUT = OUTPUT (a running sum kept by the server)."""
    onnx = pytest.importorskip("onnx")
    helper = onnx.helper
    fp32 = onnx.TensorProto.FLOAT

    def value(name: str) -> Any:
        return helper.make_tensor_value_info(name, fp32, ["batch", 1])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "STATE_IN"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
        ],
        "accumulator",
        [value("INPUT"), value("STATE_IN")],
        [value("OUTPUT"), value("STATE_OUT")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (root / "onnx_state" / "1").mkdir(parents=True)
    onnx.save(model, str(root / "onnx_state" / "1" / "model.onnx"))
    (root / "onnx_state" / "config.pbtxt").write_text(STATE_CONFIG)


def _accumulate(url: str, value: float, **parameters: Any) -> Any:
    body = {
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "FP32", "data": [value]}],
        "parameters": parameters,
    }
    reply = requests.post(f"{url}/v2/models/onnx_state/infer", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_implicit_state_is_carried_between_requests_of_an_onnx_sequence(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    _write_onnx_accumulator(tmp_path)
    with Server(tmp_path, http_port=0, grpc_port=0, metrics_port=0) as server:
        sums = []
        for index, value in enumerate([5.0, 6.0, 7.0]):
            flags = {"sequence_start": index == 0, "sequence_end": index == 2}
            body = _accumulate(server.url, value, sequence_id=77, **flags)
            sums.append(body["outputs"][0]["data"][0])
            assert [o["name"] for o in body["outputs"]] == ["OUTPUT"]  # the state stays inside
        other = _accumulate(server.url, 1.0, sequence_id=78, sequence_start=True)
    assert sums == [5.0, 11.0, 18.0]
    assert other["outputs"][0]["data"] == [1.0]  # a new sequence starts from initial_state
