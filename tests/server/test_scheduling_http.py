"""Dynamic batching, queue policies, priorities, instances and the rate limiter, over HTTP.

Every model here is the same python ``probe``: it sleeps for the largest INPUT0 value of the
execution (seconds), and answers each request with its input, the rows in the execution
(``BATCH``) and the monotonic time the execution started (``STARTED``). Python instances may
run in their own processes: CLOCK_MONOTONIC is system-wide, so the times compare.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.http_calls import concurrently, infer, output
from workbench.server.hosting import Server

PROBE = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        started = time.monotonic()
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        rows = sum(a.shape[0] for a in arrays) if self.batching else len(arrays)
        time.sleep(float(max(a.max() for a in arrays)))
        responses = []
        for array in arrays:
            lead = (array.shape[0],) if self.batching else ()
            batch = np.full(lead + (1,), rows, dtype=np.int32)
            start = np.full(lead + (1,), started, dtype=np.float64)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", array.astype(np.float32)),
                pb_utils.Tensor("BATCH", batch),
                pb_utils.Tensor("STARTED", start),
            ]))
        return responses

    def initialize(self, args):
        import json
        self.batching = json.loads(args["model_config"])["max_batch_size"] > 0
"""

#: answers like ``PROBE`` (OUTPUT0: 1.0), but only once another execute has started too: it
#: waits (a minute at most) until MEET_FOLDER holds two files, so both of two requests answer
#: 1.0 only if they ran at the same time (order of events, not a speed-up: a loaded machine
#: stalls any timing).
MEETING_PROBE = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        started = time.monotonic()
        open(os.path.join(MEET_FOLDER, str(os.getpid()) + "-" + str(started)), "w").close()
        deadline = started + 60
        while len(os.listdir(MEET_FOLDER)) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        met = float(len(os.listdir(MEET_FOLDER)) >= 2)
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", np.array([met], dtype=np.float32)),
                pb_utils.Tensor("BATCH", np.array([1], dtype=np.int32)),
                pb_utils.Tensor("STARTED", np.array([started], dtype=np.float64)),
            ])
            for _ in requests
        ]
"""

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }}]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }},
  {{ name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "STARTED" data_type: TYPE_FP64 dims: [ 1 ] }}
]
instance_group [{{ count: {count} kind: KIND_CPU {group_extra} }}]
{extra}
"""


def write_probe(
    root: Path,
    name: str,
    *,
    max_batch_size: int = 8,
    count: int = 1,
    extra: str = "",
    group_extra: str = "",
    meet: Path | None = None,
) -> None:
    """The probe model; with ``meet`` (a folder), the meeting probe (``max_batch_size: 0``)."""
    (root / name / "1").mkdir(parents=True)
    source = PROBE if meet is None else MEETING_PROBE.replace("MEET_FOLDER", repr(str(meet)))
    (root / name / "1" / "model.py").write_text(source)
    (root / name / "config.pbtxt").write_text(
        CONFIG.format(
            name=name,
            max_batch_size=max_batch_size,
            count=count,
            extra=extra,
            group_extra=group_extra,
        )
    )


def stats(url: str, model: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/v2/models/{model}/stats", timeout=10) as response:
        return json.loads(response.read())["model_stats"][0]  # type: ignore[no-any-return]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    servers: list[Server] = []

    def start(**kwargs: Any) -> str:
        server = Server(
            tmp_path / "repo", http_port=0, grpc_port=0, metrics_port=0, **kwargs
        ).start()
        servers.append(server)
        return server.url

    (tmp_path / "repo").mkdir()
    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return tmp_path / "repo"


def test_batches_form_under_concurrent_load_with_a_queue_delay(repo: Path, serve: Any) -> None:
    # A minute's delay: however slowly the client threads start, the requests wait for one
    # another until the batch is full (8 rows) rather than leave with whoever came in time.
    write_probe(
        repo, "batched", extra="dynamic_batching { max_queue_delay_microseconds: 60000000 }"
    )
    url = serve()
    results = concurrently([lambda: infer(url, "batched", 0.0)] * 8)
    assert all(status == 200 for status, _ in results), results
    sizes = [output(body, "BATCH") for _, body in results]
    assert max(sizes) >= 4, sizes
    model = stats(url, "batched")
    assert model["inference_count"] == 8
    assert model["execution_count"] < model["inference_count"]
    by_size = {b["batch_size"]: b["compute_infer"]["count"] for b in model["batch_stats"]}
    assert sum(size * count for size, count in by_size.items()) == 8
    assert model["execution_count"] == sum(by_size.values())
    assert model["inference_stats"]["success"]["count"] == 8
    assert model["inference_stats"]["queue"]["count"] == 8


def test_a_preferred_size_is_sent_without_waiting_for_the_delay(repo: Path, serve: Any) -> None:
    write_probe(
        repo,
        "preferred",
        extra="dynamic_batching { preferred_batch_size: [ 4 ] "
        "max_queue_delay_microseconds: 3600000000 }",
    )
    url = serve()
    # The delay is an hour: the requests are answered at all (infer gives up after 30 s) only
    # if the batch left without waiting for it.
    results = concurrently([lambda: infer(url, "preferred", 0.0)] * 4)
    assert [status for status, _ in results] == [200] * 4, results
    assert [output(body, "BATCH") for _, body in results] == [4, 4, 4, 4]


def test_without_a_preferred_size_a_partial_batch_waits_for_the_delay(
    repo: Path, serve: Any
) -> None:
    write_probe(repo, "delayed", extra="dynamic_batching { max_queue_delay_microseconds: 300000 }")
    url = serve()
    begin = time.monotonic()
    status, body = infer(url, "delayed", 0.0)
    assert status == 200 and output(body, "BATCH") == 1
    assert time.monotonic() - begin >= 0.28


def test_a_full_queue_rejects_at_once(repo: Path, serve: Any) -> None:
    write_probe(
        repo,
        "bounded",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { max_queue_size: 1 } }",
    )
    url = serve()
    results = concurrently([lambda: infer(url, "bounded", 0.3)] * 5)
    rejected = [body for status, body in results if status == 503]
    assert rejected, results
    assert all(
        body == {"error": "[request id: <id_unknown>] Exceeds maximum queue size"}
        for body in rejected
    )
    model = stats(url, "bounded")  # as in Triton, rejected requests are counted nowhere
    assert model["inference_stats"]["fail"]["count"] == 0
    assert model["inference_stats"]["success"]["count"] == 5 - len(rejected)
    assert sum(1 for status, _ in results if status == 200) >= 2
    status, _ = infer(url, "bounded", 0.0)
    assert status == 200  # the server and the model stay up


def test_a_request_timeout_rejects_a_queued_request(repo: Path, serve: Any) -> None:
    write_probe(
        repo,
        "timed",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { allow_timeout_override: true "
        "default_timeout_microseconds: 10000000 } }",
    )
    url = serve()
    calls = [
        lambda: infer(url, "timed", 0.4),
        lambda: (time.sleep(0.1), infer(url, "timed", 0.0, {"timeout": 50_000}))[1],
        lambda: (time.sleep(0.1), infer(url, "timed", 0.0))[1],
    ]
    slow, short, patient = concurrently(calls)
    assert slow[0] == 200 and patient[0] == 200
    assert short == (503, {"error": "Request timeout expired"})


def test_a_default_timeout_with_delay_action_keeps_the_request(repo: Path, serve: Any) -> None:
    policy = "default_queue_policy { default_timeout_microseconds: 50000 timeout_action: DELAY }"
    write_probe(repo, "delaying", max_batch_size=1, extra=f"dynamic_batching {{ {policy} }}")
    url = serve()
    calls = [
        lambda: infer(url, "delaying", 0.3),
        lambda: (time.sleep(0.1), infer(url, "delaying", 0.0))[1],
    ]
    results = concurrently(calls)
    assert [status for status, _ in results] == [200, 200]


def test_higher_priority_requests_are_served_first(repo: Path, serve: Any) -> None:
    levels = "priority_levels: 2 default_priority_level: 2"
    write_probe(repo, "ranked", max_batch_size=1, extra=f"dynamic_batching {{ {levels} }}")
    url = serve()

    def later(priority: int) -> Any:
        time.sleep(0.15)
        return infer(url, "ranked", 0.05, {"priority": priority})

    blocker = [lambda: infer(url, "ranked", 0.4)]
    low = [lambda: later(2)] * 3
    high = [lambda: (time.sleep(0.05), later(1))[1]]
    results = concurrently(blocker + low + high)
    assert all(status == 200 for status, _ in results), results
    started = [output(body, "STARTED") for _, body in results]
    assert started[4] < min(started[1:4]), started


def test_an_out_of_range_priority_uses_the_default_level(repo: Path, serve: Any) -> None:
    write_probe(
        repo,
        "levels",
        max_batch_size=1,
        extra="dynamic_batching { priority_levels: 2 default_priority_level: 1 }",
    )
    url = serve()
    for priority in (0, 7):
        status, _ = infer(url, "levels", 0.0, {"priority": priority})
        assert status == 200


def test_preserve_ordering_returns_responses_in_request_order(repo: Path, serve: Any) -> None:
    write_probe(
        repo,
        "ordered",
        max_batch_size=1,
        count=2,
        extra="dynamic_batching { preserve_ordering: true }",
    )
    url = serve()

    def call(index: int, sleep_s: float) -> tuple[float, float]:
        time.sleep(index * 0.2)  # generous: thread start-up is slow on a loaded machine
        sent = time.monotonic()
        status, body = infer(url, "ordered", sleep_s)
        assert status == 200, body
        return sent, time.monotonic()

    (sent0, done0), (sent1, done1) = concurrently([lambda: call(0, 0.8), lambda: call(1, 0.0)])
    assert sent0 < sent1
    # The second request ran at once on the other instance, but its response was held back
    # until the first one's was sent (both are released in the same loop turn, so the client
    # threads may wake in either order: compare with a margin, not by who appended first).
    assert done1 - sent1 >= 0.5, f"the second response was not held back ({done1 - sent1:.3f}s)"
    assert done1 >= done0 - 0.05


def test_two_instances_run_two_executions_at_once(repo: Path, serve: Any, tmp_path: Path) -> None:
    (tmp_path / "meet").mkdir()
    write_probe(repo, "pair", max_batch_size=0, count=2, meet=tmp_path / "meet")
    url = serve()
    results = concurrently([lambda: infer(url, "pair", 0.0, rows=0)] * 2)
    assert all(status == 200 for status, _ in results), results
    assert [output(body, "OUTPUT0") for _, body in results] == [1.0, 1.0]  # they met


def test_the_rate_limiter_serialises_instances_that_share_a_resource(
    repo: Path, serve: Any
) -> None:
    needs = 'rate_limiter { resources [ { name: "R" count: 1 } ] }'
    for name in ("left", "right"):
        write_probe(repo, name, max_batch_size=0, group_extra=needs)
    url = serve(rate_limit="execution_count", rate_limit_resources={"R": 1})
    begin = time.monotonic()
    results = concurrently(
        [lambda: infer(url, "left", 0.2, rows=0), lambda: infer(url, "right", 0.2, rows=0)]
    )
    elapsed = time.monotonic() - begin
    assert all(status == 200 for status, _ in results)
    first, second = sorted(output(body, "STARTED") for _, body in results)
    assert second - first >= 0.19, f"both executions overlapped ({second - first:.3f}s apart)"
    assert elapsed >= 0.38


def test_without_rate_limiting_the_resource_is_ignored(
    repo: Path, serve: Any, tmp_path: Path
) -> None:
    needs = 'rate_limiter { resources [ { name: "R" count: 1 } ] }'
    (tmp_path / "meet").mkdir()
    for name in ("left", "right"):
        write_probe(repo, name, max_batch_size=0, group_extra=needs, meet=tmp_path / "meet")
    url = serve(rate_limit_resources={"R": 1})
    results = concurrently(
        [lambda: infer(url, "left", 0.0, rows=0), lambda: infer(url, "right", 0.0, rows=0)]
    )
    assert all(status == 200 for status, _ in results), results
    # both executions held the one "R" at the same time: each saw the other start
    assert [output(body, "OUTPUT0") for _, body in results] == [1.0, 1.0]
