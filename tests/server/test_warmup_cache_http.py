"""Model warmup and the response cache, end to end over HTTP with python models.

Each model appends one line per execution to a log file (``<instance> <requests>``): python
instances may run in child processes, so a file is the only reliable counter.
"""

from __future__ import annotations

import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from workbench.server.hosting import Server

pytestmark = pytest.mark.integration

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
instance_group [{{ count: {count} kind: KIND_CPU }}]
{extra}
"""

MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

LOG = {log!r}
SLEEP = {sleep}
FAIL = {fail}
GATE = {gate!r}


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]

    def execute(self, requests):
        with open(LOG, "a") as log:
            log.write(f"{{self.instance}} {{len(requests)}}\\n")
        if FAIL:
            raise ValueError("warmup boom")
        time.sleep(SLEEP)
        deadline = time.monotonic() + 60
        while GATE and not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.01)  # held until the test opens the gate
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (x + 1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""

WARMUP = """
model_warmup [{{
  name: "{sample}" batch_size: {batch_size} count: {count}
  inputs {{ key: "INPUT0" value: {{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true }} }}
}}]
"""


def write_model(
    repo: Path,
    name: str,
    *,
    count: int = 1,
    extra: str = "",
    sleep: float = 0.0,
    fail: bool = False,
    gate: Path | None = None,
) -> Path:
    """A python model adding one to FP32[4]; returns the path of its execution log. With
    ``gate``, each execution waits (a minute at most) until that file exists."""
    log = repo.parent / f"{name}.log"
    model = repo / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG.format(name=name, count=count, extra=extra))
    source = MODEL.format(log=str(log), sleep=sleep, fail=fail, gate=gate and str(gate))
    (model / "1" / "model.py").write_text(textwrap.dedent(source))
    return log


def executions(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def infer(server: Server, model: str, values: list[float]) -> list[float]:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": values}]}
    reply = requests.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    data: list[float] = reply.json()["outputs"][0]["data"]
    return data


def stats(server: Server, model: str) -> dict[str, Any]:
    reply = requests.get(f"{server.url}/v2/models/{model}/stats", timeout=10)
    assert reply.status_code == 200, reply.text
    entry: dict[str, Any] = reply.json()["model_stats"][0]
    return entry


def index_entry(server: Server, model: str) -> dict[str, Any]:
    reply = requests.post(f"{server.url}/v2/repository/index", json={}, timeout=10)
    return next(e for e in reply.json() if e["name"] == model)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


# -- warmup ------------------------------------------------------------------------------------
def test_model_is_not_ready_until_its_warmup_finishes(repo: Path) -> None:
    warmup = WARMUP.format(sample="slow", batch_size=1, count=1)
    gate = repo.parent / "open"
    log = write_model(repo, "slow", extra=warmup, gate=gate)
    with Server(
        repo, http_port=0, grpc_port=0, metrics_port=0, model_control_mode="explicit"
    ) as server:
        replies: list[requests.Response] = []
        loader = threading.Thread(
            target=lambda: replies.append(
                requests.post(f"{server.url}/v2/repository/models/slow/load", timeout=60)
            )
        )
        loader.start()
        deadline = time.monotonic() + 60
        while executions(log) != ["slow_0_0 1"]:  # the warmup runs, held at the gate
            assert loader.is_alive() and time.monotonic() < deadline, (replies, executions(log))
            time.sleep(0.01)
        ready = requests.get(f"{server.url}/v2/models/slow/ready", timeout=10)
        assert ready.status_code == 400  # not ready while its warmup runs
        assert index_entry(server, "slow").get("state") == "LOADING"
        gate.touch()
        loader.join(60)
        assert replies and replies[0].status_code == 200, replies
        assert requests.get(f"{server.url}/v2/models/slow/ready", timeout=10).status_code == 200
        assert executions(log) == ["slow_0_0 1"]


def test_warmup_runs_count_times_on_every_instance(repo: Path) -> None:
    warmup = WARMUP.format(sample="w", batch_size=2, count=3)
    log = write_model(repo, "warm", count=2, extra=warmup)
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0) as server:
        assert requests.get(f"{server.url}/v2/models/warm/ready", timeout=10).status_code == 200
        lines = executions(log)
        # batch_size requests in one execution, count times, on each of the two instances
        assert sorted(lines) == ["warm_0_0 2"] * 3 + ["warm_0_1 2"] * 3
        assert infer(server, "warm", [1, 2, 3, 4]) == [2, 3, 4, 5]


def test_warmup_counts_in_statistics_as_in_triton(repo: Path) -> None:
    # Observed on tritonserver 2.51: warmup executions are reported like any other
    # (2 instances x count 3 x batch_size 2 -> inference_count 12, execution_count 6).
    warmup = WARMUP.format(sample="w", batch_size=2, count=3)
    write_model(repo, "warm", count=2, extra=warmup)
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0) as server:
        entry = stats(server, "warm")
        assert (entry["inference_count"], entry["execution_count"]) == (12, 6)
        assert entry["inference_stats"]["success"]["count"] == 12
        assert [b["batch_size"] for b in entry["batch_stats"]] == [2]


def test_failing_warmup_leaves_the_model_unavailable_with_the_reason(repo: Path) -> None:
    warmup = WARMUP.format(sample="bad", batch_size=2, count=1)
    write_model(repo, "bad", extra=warmup, fail=True)
    write_model(repo, "good")
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0, strict_readiness=False) as server:
        assert requests.get(f"{server.url}/v2/models/bad/ready", timeout=10).status_code == 400
        assert requests.get(f"{server.url}/v2/models/good/ready", timeout=10).status_code == 200
        entry = index_entry(server, "bad")
        assert entry["state"] == "UNAVAILABLE"
        reason = entry["reason"]
        assert reason.startswith("Invalid argument: failed to run warmup sample 'bad': "), reason
        # one error per request of the sample's batch, each followed by "; " (as Triton)
        assert reason.count("warmup boom") == 2 and reason.endswith("; "), reason


# -- response cache ----------------------------------------------------------------------------
CACHED = "response_cache { enable: true }"


def test_identical_requests_hit_the_cache(repo: Path) -> None:
    log = write_model(repo, "cached", extra=CACHED)
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0, cache_size=1 << 20) as server:
        assert infer(server, "cached", [1, 2, 3, 4]) == [2, 3, 4, 5]
        assert infer(server, "cached", [1, 2, 3, 4]) == [2, 3, 4, 5]
        assert len(executions(log)) == 1  # the second answer came from the cache
        assert infer(server, "cached", [1, 2, 3, 5]) == [2, 3, 4, 6]
        assert len(executions(log)) == 2  # other input, other key
        entry = stats(server, "cached")
        inference = entry["inference_stats"]
        assert inference["cache_hit"]["count"] == 1 and inference["cache_hit"]["ns"] > 0
        assert inference["cache_miss"]["count"] == 2 and inference["cache_miss"]["ns"] > 0
        # As Triton: a hit is a success but neither an inference nor an execution.
        assert (entry["inference_count"], entry["execution_count"]) == (2, 2)
        assert inference["success"]["count"] == 3 and inference["queue"]["count"] == 3
        assert inference["compute_infer"]["count"] == 2


def test_models_without_response_cache_are_never_cached(repo: Path) -> None:
    log = write_model(repo, "plain")
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0, cache_size=1 << 20) as server:
        for _ in range(2):
            assert infer(server, "plain", [1, 1, 1, 1]) == [2, 2, 2, 2]
        assert len(executions(log)) == 2
        inference = stats(server, "plain")["inference_stats"]
        assert inference["cache_hit"]["count"] == inference["cache_miss"]["count"] == 0


def test_no_server_cache_means_no_caching(repo: Path) -> None:
    log = write_model(repo, "cached", extra=CACHED)
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0) as server:
        for _ in range(2):
            assert infer(server, "cached", [1, 1, 1, 1]) == [2, 2, 2, 2]
        assert len(executions(log)) == 2
        inference = stats(server, "cached")["inference_stats"]
        assert inference["cache_hit"]["count"] == inference["cache_miss"]["count"] == 0
