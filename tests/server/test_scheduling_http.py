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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.server.http_calls import concurrently, infer, output
from workbench.server.hosting import Server

PROBE = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        started = time.monotonic()
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        rows = sum(a.shape[0] for a in arrays) if self.batching else len(arrays)
        longest = float(max(a.max() for a in arrays))
        if longest >= GATED:  # hold the instance until the test opens the gate
            open(os.path.join(GATE_FOLDER, "started"), "w").close()
            deadline = started + 60
            while not os.path.exists(os.path.join(GATE_FOLDER, "open")):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.001)
        else:
            time.sleep(longest)
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


#: an INPUT0 value from which ``PROBE`` holds its instance until the test opens the gate
GATED = 100.0


class Gate:
    """The folder a ``PROBE`` execution given ``GATED`` holds its instance on: it says
    ``started`` there, and returns once the test opens the gate (a minute at most)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(exist_ok=True)

    def wait_started(self) -> None:
        wait_for(lambda: (self.folder / "started").exists(), "the gated execution to start")

    def open(self) -> None:
        (self.folder / "open").touch()


def wait_for(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    """Poll ``condition`` (bounded): the order of events, whatever the machine's speed."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f} s for {what}"
        time.sleep(0.01)


def pending(server: Server, model: str) -> int:
    """Requests of ``model`` waiting in its queue now (Triton's pending-request gauge)."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{") and f'model="{model}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


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
    """The probe model; with ``meet`` (a folder), the meeting probe (``max_batch_size: 0``).
    Its gate is ``root / "gate"`` (``Gate``)."""
    (root / name / "1").mkdir(parents=True)
    gate = repr(str(root / "gate"))
    source = PROBE.replace("GATE_FOLDER", gate).replace("GATED", repr(GATED))
    if meet is not None:
        source = MEETING_PROBE.replace("MEET_FOLDER", repr(str(meet)))
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

    start.servers = servers

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


def _gated(repo: Path, serve: Any, name: str, extra: str) -> tuple[str, Server, Gate]:
    write_probe(repo, name, max_batch_size=1, extra=extra)
    url = serve()
    return url, serve.servers[-1], Gate(repo / "gate")


def test_a_request_timeout_rejects_a_queued_request(repo: Path, serve: Any) -> None:
    policy = "allow_timeout_override: true default_timeout_microseconds: 10000000"
    extra = f"dynamic_batching {{ default_queue_policy {{ {policy} }} }}"
    url, server, gate = _gated(repo, serve, "timed", extra)
    with ThreadPoolExecutor(3) as pool:
        blocker = pool.submit(infer, url, "timed", GATED)
        gate.wait_started()  # the one instance is busy from here until the gate opens
        short = pool.submit(infer, url, "timed", 0.0, {"timeout": 50_000})
        wait_for(lambda: pending(server, "timed") == 1, "the short request to queue")
        time.sleep(0.2)  # a lower bound: its 50 ms run out in the queue
        patient = pool.submit(infer, url, "timed", 0.0)  # the default 10 s are plenty
        wait_for(lambda: pending(server, "timed") == 2, "the patient request to queue")
        gate.open()
        assert blocker.result()[0] == 200 and patient.result()[0] == 200
        assert short.result() == (503, {"error": "Request timeout expired"})


def test_a_default_timeout_with_delay_action_keeps_the_request(repo: Path, serve: Any) -> None:
    policy = "default_queue_policy { default_timeout_microseconds: 50000 timeout_action: DELAY }"
    url, server, gate = _gated(repo, serve, "delaying", f"dynamic_batching {{ {policy} }}")
    with ThreadPoolExecutor(2) as pool:
        blocker = pool.submit(infer, url, "delaying", GATED)
        gate.wait_started()
        delayed = pool.submit(infer, url, "delaying", 0.0)
        wait_for(lambda: pending(server, "delaying") == 1, "the request to queue")
        time.sleep(0.2)  # a lower bound: its 50 ms timeout has passed in the queue
        gate.open()
        assert [blocker.result()[0], delayed.result()[0]] == [200, 200]


def test_higher_priority_requests_are_served_first(repo: Path, serve: Any) -> None:
    levels = "priority_levels: 2 default_priority_level: 2"
    url, server, gate = _gated(repo, serve, "ranked", f"dynamic_batching {{ {levels} }}")
    with ThreadPoolExecutor(5) as pool:
        blocker = pool.submit(infer, url, "ranked", GATED)
        gate.wait_started()
        low = []
        for queued in range(1, 4):  # three at the default (low) level, in order
            low.append(pool.submit(infer, url, "ranked", 0.0, {"priority": 2}))
            wait_for(lambda n=queued: pending(server, "ranked") == n, f"{queued} queued")
        high = pool.submit(infer, url, "ranked", 0.0, {"priority": 1})  # queued last
        wait_for(lambda: pending(server, "ranked") == 4, "the high-priority request to queue")
        gate.open()
        results = [blocker.result(), *(f.result() for f in low), high.result()]
    assert all(status == 200 for status, _ in results), results
    started = [output(body, "STARTED") for _, body in results]
    assert started[4] < min(started[1:4]), started  # the last to come is served first


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
    gate = Gate(repo / "gate")
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(infer, url, "ordered", GATED)
        gate.wait_started()  # the first holds one instance
        second = pool.submit(infer, url, "ordered", 0.0)  # runs at once on the other
        wait_for(lambda: stats(url, "ordered")["execution_count"] == 1, "the second to run")
        time.sleep(0.3)  # a lower bound: an answer not held back would be out by now
        assert not second.done(), "the second response was not held back"
        gate.open()
        assert first.result()[0] == 200 and second.result()[0] == 200


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
