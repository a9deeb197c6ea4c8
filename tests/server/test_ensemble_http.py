"""Ensembles over HTTP, against one server and a repository of small python models.

Each composing model computes ``OUT = <expression of its inputs>`` (optionally once the model
of another branch has started too), so that every ensemble result can be recomputed by calling
the steps by hand. Broken ensembles sit in the same repository: they must be UNAVAILABLE with
an actionable reason while the rest serves. Expected texts start with what Triton 2.51 answers
in the same situation.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench.server.hosting import Server

MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

def meet(folder):
    # wait (a minute at most) until another model's execute has started too
    open(os.path.join(folder, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(folder)) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("no other model ran at the same time")
        time.sleep(0.001)

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = [pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in {inputs!r}]
            if {meet!r}:
                meet({meet!r})
            if {fail}:
                raise RuntimeError("boom")
            y = ({expression}).astype(np.{dtype})
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", y)]))
        return responses
"""

PLAIN = """
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [{inputs}]
output [{{ name: "OUT" data_type: {dtype} dims: [ {dims} ] }}]
{extra}
"""

ENSEMBLE = """
name: "{name}"
platform: "ensemble"
max_batch_size: {max_batch_size}
input [{inputs}]
output [{outputs}]
ensemble_scheduling {{ step [ {steps} ] }}
"""


def tensor_specs(names: Sequence[str], dtype: str = "TYPE_FP32", dims: str = "4") -> str:
    return ", ".join(f'{{ name: "{n}" data_type: {dtype} dims: [ {dims} ] }}' for n in names)


def write_model(
    root: Path,
    name: str,
    expression: str,
    *,
    inputs: Sequence[str] = ("X",),
    meet: Path | None = None,
    fail: bool = False,
    dtype: str = "TYPE_FP32",
    dims: str = "4",
    max_batch_size: int = 8,
    versions: Sequence[int] = (1,),
    extra: str = "",
) -> None:
    """A python model ``OUT = expression`` over ``x[i]``, the i-th input; with ``meet`` (a
    folder), each execute first waits until a second model's execute has started too."""
    numpy_type = {"TYPE_FP32": "float32", "TYPE_INT32": "int32"}[dtype]
    specs = tensor_specs(inputs, dtype, dims)
    (root / name).mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(
        PLAIN.format(
            name=name,
            max_batch_size=max_batch_size,
            inputs=specs,
            dtype=dtype,
            dims=dims,
            extra=extra,
        )
    )
    for version in versions:
        source = MODEL.format(
            inputs=list(inputs),
            meet=None if meet is None else str(meet),
            fail=fail,
            expression=expression.replace("VERSION", str(version)),
            dtype=numpy_type,
        )
        (root / name / str(version)).mkdir()
        (root / name / str(version) / "model.py").write_text(source)


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int = -1) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'{{ model_name: "{model}" model_version: {version} {" ".join(maps)} }}'


def write_ensemble(
    root: Path,
    name: str,
    steps: Sequence[str],
    *,
    inputs: Sequence[str] = ("IN",),
    outputs: Sequence[str] = ("OUT",),
    dtype: str = "TYPE_FP32",
    max_batch_size: int = 8,
) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(
        ENSEMBLE.format(
            name=name,
            max_batch_size=max_batch_size,
            inputs=tensor_specs(inputs, dtype),
            outputs=tensor_specs(outputs),
            steps=", ".join(steps),
        )
    )


def write_repository(root: Path) -> None:
    write_model(root, "add_one", "x[0] + 1")
    write_model(root, "times_two", "x[0] * 2")
    write_model(root, "sum_pair", "x[0] + x[1]", inputs=("A", "B"))
    (root.parent / "diamond_meet").mkdir()
    write_model(root, "meet_a", "x[0] + 1", meet=root.parent / "diamond_meet")
    write_model(root, "meet_b", "x[0] * 2", meet=root.parent / "diamond_meet")
    write_model(root, "stats_a", "x[0] + 1")
    write_model(root, "stats_b", "x[0] * 3")
    write_model(root, "fails", "x[0]", fail=True)
    write_model(root, "versioned", "x[0] + 10 * VERSION", versions=(1, 2), extra=ALL_VERSIONS)
    write_model(root, "no_batch", "x[0] + 1", max_batch_size=0)
    write_model(root, "int_add", "x[0] + 1", dtype="TYPE_INT32")
    write_model(root, "wide", "x[0] + 1", dims="8")
    write_model(root, "small_batch", "x[0] + 1", max_batch_size=2)
    write_model(root, "broken", "x[0]")
    (root / "broken" / "1" / "model.py").write_text(BROKEN)

    chain = [
        step("add_one", {"X": "IN"}, {"OUT": "mid"}),
        step("times_two", {"X": "mid"}, {"OUT": "OUT"}),
    ]
    write_ensemble(root, "pipeline", chain)
    write_ensemble(
        root,
        "diamond",
        [
            step("meet_a", {"X": "IN"}, {"OUT": "left"}),
            step("meet_b", {"X": "IN"}, {"OUT": "right"}),
            step("sum_pair", {"A": "left", "B": "right"}, {"OUT": "OUT"}),
        ],
    )
    write_ensemble(  # P feeds two steps, and both inputs of one of them
        root,
        "fan_out",
        [
            step("add_one", {"X": "IN"}, {"OUT": "P"}),
            step("sum_pair", {"A": "P", "B": "P"}, {"OUT": "TWICE"}),
            step("times_two", {"X": "P"}, {"OUT": "DOUBLED"}),
        ],
        outputs=("TWICE", "DOUBLED"),
    )
    write_ensemble(  # Triton 2.51's ens_diamond: PLUS_ONE is an output and an intermediate
        root,
        "outputs",
        [
            step("add_one", {"X": "IN"}, {"OUT": "PLUS_ONE"}),
            step("times_two", {"X": "IN"}, {"OUT": "DOUBLED"}),
            step("sum_pair", {"A": "PLUS_ONE", "B": "DOUBLED"}, {"OUT": "OUT"}),
        ],
        outputs=("OUT", "PLUS_ONE"),
    )
    write_ensemble(root, "latest", [step("versioned", {"X": "IN"}, {"OUT": "OUT"})])
    write_ensemble(root, "pinned", [step("versioned", {"X": "IN"}, {"OUT": "OUT"}, version=1)])
    write_ensemble(
        root,
        "stats_chain",
        [
            step("stats_a", {"X": "IN"}, {"OUT": "mid"}),
            step("stats_b", {"X": "mid"}, {"OUT": "OUT"}),
        ],
    )
    write_ensemble(
        root,
        "failing",
        [step("add_one", {"X": "IN"}, {"OUT": "mid"}), step("fails", {"X": "mid"}, {"OUT": "OUT"})],
    )
    write_ensemble(root, "mixed_batch", [step("no_batch", {"X": "IN"}, {"OUT": "OUT"})])
    write_broken_ensembles(root)


ALL_VERSIONS = "version_policy { all { } }"
BROKEN = (
    "class TritonPythonModel:\n"
    "    def initialize(self, args):\n"
    "        raise RuntimeError('weights file is missing')\n"
)


def write_broken_ensembles(root: Path) -> None:
    into = {"X": "IN"}
    write_ensemble(
        root,
        "bad_dtype",
        [step("add_one", into, {"OUT": "mid"}), step("int_add", {"X": "mid"}, {"OUT": "OUT"})],
    )
    write_ensemble(
        root,
        "bad_shape",
        [step("add_one", into, {"OUT": "mid"}), step("wide", {"X": "mid"}, {"OUT": "OUT"})],
    )
    write_ensemble(root, "bad_unknown", [step("no_such_model", into, {"OUT": "OUT"})])
    write_ensemble(
        root,
        "bad_cycle",
        [
            step("sum_pair", {"A": "IN", "B": "LOOP_B"}, {"OUT": "LOOP_A"}),
            step("add_one", {"X": "LOOP_A"}, {"OUT": "LOOP_B"}),
            step("times_two", {"X": "LOOP_A"}, {"OUT": "OUT"}),
        ],
    )
    write_ensemble(
        root, "bad_orphan", [step("sum_pair", {"A": "IN", "B": "ghost"}, {"OUT": "OUT"})]
    )
    write_ensemble(
        root, "bad_unwritten", [step("add_one", into, {"OUT": "OUT"})], outputs=("OUT", "OUT2")
    )
    write_ensemble(root, "bad_version", [step("versioned", into, {"OUT": "OUT"}, version=7)])
    write_ensemble(root, "bad_batch", [step("small_batch", into, {"OUT": "OUT"})])
    write_ensemble(root, "bad_input_name", [step("add_one", {"WRONG": "IN"}, {"OUT": "OUT"})])
    write_ensemble(root, "bad_dependency", [step("broken", into, {"OUT": "OUT"})])


# --- HTTP helpers ----------------------------------------------------------------------------


def call(url: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path, data=data, method="GET" if data is None else "POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def infer_body(array: np.ndarray, name: str = "IN", **extra: Any) -> dict[str, Any]:
    tensor = {"name": name, "shape": list(array.shape), "datatype": "FP32"}
    return {"inputs": [{**tensor, "data": array.flatten().tolist()}], **extra}


def infer(url: str, model: str, array: np.ndarray, name: str = "IN") -> dict[str, np.ndarray]:
    status, body = call(url, f"/v2/models/{model}/infer", infer_body(array, name))
    assert status == 200, body
    return {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in body["outputs"]}


def stats(url: str, model: str) -> dict[str, Any]:
    status, body = call(url, f"/v2/models/{model}/stats")
    assert status == 200, body
    return dict(body["model_stats"][0])


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("ensembles") / "repo"
    write_repository(root)
    with Server(root, http_port=0, grpc_port=0, metrics_port=0, strict_readiness=False) as server:
        yield server.url


def data(rows: int = 2) -> np.ndarray:
    return np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)


# --- results ---------------------------------------------------------------------------------


def test_ensemble_equals_running_the_steps_by_hand(url: str) -> None:
    x = data(3)
    mid = infer(url, "add_one", x, "X")["OUT"]
    expected = infer(url, "times_two", mid, "X")["OUT"]
    result = infer(url, "pipeline", x)
    np.testing.assert_array_equal(result["OUT"], expected)
    assert result["OUT"].shape == (3, 4)  # the batch dimension passes through


def test_one_tensor_feeds_several_steps(url: str) -> None:
    x = data()
    p = infer(url, "add_one", x, "X")["OUT"]
    status, body = call(url, "/v2/models/sum_pair/infer", two_inputs(p, p))
    assert status == 200, body
    twice = np.array(body["outputs"][0]["data"]).reshape(p.shape)
    result = infer(url, "fan_out", x)
    np.testing.assert_array_equal(result["TWICE"], twice)
    np.testing.assert_array_equal(result["DOUBLED"], infer(url, "times_two", p, "X")["OUT"])


def two_inputs(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    return {"inputs": [infer_body(a, "A")["inputs"][0], infer_body(b, "B")["inputs"][0]]}


def test_independent_branches_run_concurrently(url: str) -> None:
    # Order of events, not a duration: each branch's model answers only once the other's has
    # started (it fails after a minute alone), so the result proves they ran at the same time.
    x = data(1)
    result = infer(url, "diamond", x)
    np.testing.assert_array_equal(result["OUT"], (x + 1) + x * 2)


def test_model_version_minus_one_is_the_latest(url: str) -> None:
    assert call(url, "/v2/models/versioned")[1]["versions"] == ["1", "2"]
    x = data()
    np.testing.assert_array_equal(infer(url, "latest", x)["OUT"], x + 20)
    np.testing.assert_array_equal(infer(url, "pinned", x)["OUT"], x + 10)


def test_response_is_shaped_as_tritons(url: str) -> None:
    status, body = call(url, "/v2/models/outputs/infer", infer_body(data(1)))
    assert status == 200, body
    assert list(body) == ["model_name", "model_version", "parameters", "outputs"]
    assert body["parameters"] == {"sequence_id": 0, "sequence_start": False, "sequence_end": False}
    assert [o["name"] for o in body["outputs"]] == ["PLUS_ONE", "OUT"]  # Triton's order
    outputs = {o["name"]: o["data"] for o in body["outputs"]}
    assert outputs["OUT"] == [1.0, 4.0, 7.0, 10.0]  # (x + 1) + 2x for x = 0, 1, 2, 3


def test_asking_for_some_outputs_prunes_steps_as_triton(url: str) -> None:
    body = infer_body(data(1), outputs=[{"name": "OUT"}, {"name": "PLUS_ONE"}])
    status, answer = call(url, "/v2/models/outputs/infer", body)
    assert status == 200 and [o["name"] for o in answer["outputs"]] == ["PLUS_ONE", "OUT"]
    status, answer = call(url, "/v2/models/outputs/infer", {**body, "outputs": [{"name": "OUT"}]})
    assert status == 400
    assert answer["error"].startswith(
        "in ensemble 'outputs', [request id: <id_unknown>] unexpected deadlock, at least one "
        "output is not set while no more ensemble steps can be made; 'OUT' never written: for "
        "the requested outputs Triton 2.51 skips step 0 (model 'add_one');"
    )


def test_batching_ensemble_with_a_non_batching_step(url: str) -> None:
    assert infer(url, "mixed_batch", data(1))["OUT"].shape == (1, 4)
    status, body = call(url, "/v2/models/mixed_batch/infer", infer_body(data(2)))
    assert status == 400
    assert body["error"] == (
        "in ensemble 'mixed_batch', [request id: <id_unknown>] unexpected shape for input 'X' "
        "for model 'no_batch'. Expected [4], got [2,4].  (step 0, model 'no_batch')"
    )


# --- failures and statistics -----------------------------------------------------------------


def test_failing_step_names_the_step_and_model(url: str) -> None:
    status, body = call(url, "/v2/models/failing/infer", infer_body(data()))
    assert status == 500
    assert body["error"].startswith("in ensemble 'failing', ")
    assert "RuntimeError: boom" in body["error"]
    assert body["error"].endswith("(step 1, model 'fails')")
    fail = stats(url, "failing")["inference_stats"]["fail"]
    assert fail["count"] == 2  # one request, counted twice as Triton 2.51 does
    assert call(url, "/v2/models/pipeline/ready")[0] == 200


def test_statistics_per_composing_model(url: str) -> None:
    requests, rows = 5, 2
    for _ in range(requests):
        infer(url, "stats_chain", data(rows))
    for model in ("stats_a", "stats_b", "stats_chain"):
        model_stats = stats(url, model)
        assert model_stats["inference_count"] == requests * rows, model
        assert model_stats["execution_count"] == requests, model
        inference = model_stats["inference_stats"]
        for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
            assert inference[phase]["count"] == requests, (model, phase)
        assert inference["fail"]["count"] == 0
        [batch] = model_stats["batch_stats"]
        assert batch["batch_size"] == rows and batch["compute_infer"]["count"] == requests
    ensemble = stats(url, "stats_chain")["inference_stats"]
    steps = sum(
        stats(url, m)["inference_stats"]["compute_infer"]["ns"] for m in ("stats_a", "stats_b")
    )
    # The ensemble's compute_infer is the time its steps took, so it covers theirs.
    assert ensemble["compute_infer"]["ns"] >= steps


# --- load-time validation --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "reason"),
    [
        (
            "bad_dtype",
            "in ensemble bad_dtype, ensemble tensor mid: inconsistent data type: TYPE_FP32 is "
            "inferred from model add_one while TYPE_INT32 is inferred from model int_add; step 0 "
            "(model 'add_one') output 'OUT' is TYPE_FP32 but step 1 (model 'int_add') input 'X' "
            "is TYPE_INT32: make the two data types agree",
        ),
        (
            "bad_shape",
            "in ensemble bad_shape, ensemble tensor mid: inconsistent shape: [-1,4] is inferred "
            "from model add_one while [-1,8] is inferred from model wide; step 0 (model "
            "'add_one') output 'OUT' has dims [4] but step 1 (model 'wide') input 'X' has dims "
            "[8]",
        ),
        (
            "bad_unknown",
            "ensemble bad_unknown contains models that are not available or ambiguous: "
            "no_such_model; step 0 (model 'no_such_model'): no such model in the model "
            "repository",
        ),
        (
            "bad_cycle",
            "steps form a cycle: step 0 (model 'sum_pair') -> 'LOOP_A' -> step 1 (model "
            "'add_one') -> 'LOOP_B' -> step 0 (model 'sum_pair')",
        ),
        (
            "bad_cycle",
            "output 'OUT' for ensemble 'bad_cycle' is not written: at least one of its "
            "depending tensors, 'LOOP_B', is not connected",
        ),
        (
            "bad_orphan",
            "ensemble tensor 'ghost' is not connected: step 0 (model 'sum_pair') feeds its "
            "input 'B' from 'ghost', which is neither an ensemble input nor written by any step",
        ),
        (
            "bad_unwritten",
            "ensemble output 'OUT2' for ensemble bad_unwritten' is not used: no step writes "
            "'OUT2'; map a step output to it",
        ),
        (
            "bad_version",
            "ensemble 'bad_version' depends on 'versioned' whose required version 7 is not "
            "loaded. step 0 (model 'versioned') asks for version 7 but 'versioned' has "
            "version(s) 1, 2 loaded",
        ),
        (
            "bad_batch",
            "ensemble bad_batch allows maximum batch size 8, but it contains model small_batch "
            "which only allows maximum batch size to be 2; step 0 (model 'small_batch'): lower "
            "the ensemble's 'max_batch_size' to 2",
        ),
        (
            "bad_input_name",
            "in ensemble bad_input_name, ensemble tensor IN is mapping to non-existing input "
            "WRONG in model add_one; step 0 (model 'add_one'): the inputs of 'add_one' are 'X'",
        ),
        (
            "bad_dependency",
            "ensemble 'bad_dependency' depends on 'broken' which has no loaded version. Model "
            "'broken' loading failed with error:",
        ),
    ],
)
def test_invalid_ensemble_is_unavailable_with_its_reason(url: str, model: str, reason: str) -> None:
    status, index = call(url, "/v2/repository/index", {})
    assert status == 200
    entry = next(e for e in index if e["name"] == model)
    assert entry["state"] == "UNAVAILABLE"
    assert reason in entry["reason"]
    assert call(url, f"/v2/models/{model}/ready")[0] != 200
    # The other models keep serving.
    np.testing.assert_array_equal(infer(url, "add_one", data(), "X")["OUT"], data() + 1)
