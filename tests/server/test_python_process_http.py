"""Python instances as stub processes, seen through HTTP: two cores, crash isolation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.http_calls import concurrently, infer, output
from workbench.server.hosting import Server

#: burns CPU in pure Python for INPUT0 seconds (so only separate processes run two at once);
#: INPUT0 = -2 burns CPU until another execute has started too (OUTPUT0: 1 if one did, within
#: a minute); other negative values make the stub process exit abruptly, as a crashing
#: extension would.
MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

MEET = MEET_FOLDER


def meet():
    open(os.path.join(MEET, str(os.getpid()) + "-" + str(time.monotonic_ns())), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(MEET)) < 2 and time.monotonic() < deadline:
        pass
    return np.array([float(len(os.listdir(MEET)) >= 2)], dtype=np.float32)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            seconds = float(x.max())
            if seconds == -2:
                x, seconds = meet(), 0.0
            elif seconds < 0:
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
    meet = root / "meet" / name
    meet.mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(MODEL.replace("MEET_FOLDER", repr(str(meet))))
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


def _meet_twice(url: str, model: str) -> set[int]:
    """Two requests whose executes each wait, burning CPU, until the other has started: both
    finish only if two instances run them at once (order of events, not a speed-up: a shared
    machine stalls). Returns the stub processes that ran them."""
    results = concurrently([lambda: infer(url, model, -2.0, rows=0)] * 2)
    assert all(status == 200 for status, _ in results), results
    assert [output(body, "OUTPUT0") for _, body in results] == [1.0, 1.0]
    return {output(body, "PID") for _, body in results}


def test_a_cpu_bound_python_model_with_count_2_runs_two_requests_at_once(url: str) -> None:
    assert len(_meet_twice(url, "burn_two")) == 2  # in two processes: two cores


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
    assert len(_meet_twice(url, "burn_groups")) == 2  # one stub process per group's instance
