"""Python instances as stub processes, seen through HTTP: two cores, crash isolation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.test_scheduling_http import concurrently, infer, output
from workbench.server.hosting import Server

#: burns CPU in pure Python for INPUT0 seconds (so only separate processes run two at once);
#: INPUT0 < 0 makes the stub process exit abruptly, as a crashing extension would.
MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            seconds = float(x.max())
            if seconds < 0:
                os._exit(3)
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass
            out = pb_utils.Tensor("OUTPUT0", x.astype(np.float32))
            pid = pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))
            responses.append(pb_utils.InferenceResponse([out, pid]))
        return responses
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "PID" data_type: TYPE_INT64 dims: [ 1 ] }}
]
instance_group [{groups}]
"""


def write(root: Path, name: str, count: int, groups: str = "") -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(MODEL)
    groups = groups or f"{{ count: {count} kind: KIND_CPU }}"
    (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, groups=groups))


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    write(tmp_path, "burn_one", 1)
    write(tmp_path, "burn_two", 2)
    write(tmp_path, "burn_groups", 0, "{ count: 1 kind: KIND_CPU }, { count: 1 kind: KIND_MODEL }")
    with Server(tmp_path, http_port=0, grpc_port=0, metrics_port=0) as server:
        yield server.url


def _elapsed(url: str, model: str, calls: int) -> float:
    begin = time.monotonic()
    results = concurrently([lambda: infer(url, model, 0.15, rows=0)] * calls)
    assert all(status == 200 for status, _ in results), results
    return time.monotonic() - begin


def test_a_cpu_bound_python_model_with_count_2_uses_two_cores(url: str) -> None:
    best = 0.0
    for _ in range(5):  # a shared machine: keep the best of a few tries
        one = _elapsed(url, "burn_two", 1)
        two = _elapsed(url, "burn_two", 2)
        best = max(best, 2 * one / two)
        if best >= 1.4:
            break
    assert best >= 1.4, f"two requests on two instances ran only {best:.2f}x as fast as one"


def test_one_instance_serialises_the_same_load(url: str) -> None:
    two = _elapsed(url, "burn_one", 2)
    assert two >= 0.28, f"two 150 ms requests on one instance took only {two:.3f}s"


def test_a_crashing_stub_fails_only_its_request_and_is_restarted(url: str) -> None:
    status, body = infer(url, "burn_one", 0.0, rows=0)
    assert status == 200
    before = output(body, "PID")
    status, body = infer(url, "burn_one", -1.0, rows=0)
    assert status == 500
    assert "Stub process 'burn_one_0_0' is not healthy." in body["error"]
    assert infer(url, "burn_two", 0.0, rows=0)[0] == 200  # other models are untouched
    status, body = infer(url, "burn_one", 0.0, rows=0)  # waits for the restarted stub
    assert status == 200
    assert output(body, "PID") != before


def test_several_instance_groups_each_give_instances(url: str) -> None:
    pids: set[int] = set()
    best = 0.0
    for _ in range(5):
        one = _elapsed(url, "burn_groups", 1)
        two = _elapsed(url, "burn_groups", 2)
        best = max(best, 2 * one / two)
        results = concurrently([lambda: infer(url, "burn_groups", 0.05, rows=0)] * 2)
        pids.update(output(body, "PID") for _, body in results)
        if best >= 1.4 and len(pids) == 2:
            break
    assert len(pids) == 2, "two groups of one instance should be two stub processes"
    assert best >= 1.4, f"the two groups' instances ran only {best:.2f}x as fast as one"
