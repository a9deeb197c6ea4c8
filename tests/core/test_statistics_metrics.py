"""What ``ModelStatistics`` keeps for the metrics endpoint: failure reasons, the pending
gauge, the load duration and the durations handed to an observer."""

from __future__ import annotations

import time

from workbench.core.queue_policy import QueueTimeoutError
from workbench.core.statistics import ModelStatistics, RequestTimes, failure_reason
from workbench.errors import CancelledError, InternalError, UnavailableError


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float]] = []

    def observe(self, name: str, microseconds: float) -> None:
        self.seen.append((name, microseconds))


def test_failure_reasons_add_up_to_the_fail_count() -> None:
    stats = ModelStatistics("m", 1)
    for reason in ("REJECTED", "BACKEND", "BACKEND", "OTHER", "nonsense"):
        stats.record_failure(RequestTimes(), reason)
    snapshot = stats.snapshot()
    assert snapshot.failures == {"REJECTED": 1, "CANCELED": 0, "BACKEND": 2, "OTHER": 2}
    assert (
        snapshot.inference["fail"].count == 5 == stats.to_json()["inference_stats"]["fail"]["count"]
    )


def test_failure_reason_of_scheduling_errors() -> None:
    assert failure_reason(QueueTimeoutError("Request timeout expired")) == "REJECTED"
    assert failure_reason(CancelledError("cancelled")) == "CANCELED"
    assert failure_reason(UnavailableError("model is being unloaded")) == "OTHER"
    assert failure_reason(InternalError("boom")) == "OTHER"


def test_pending_count_enters_once_and_leaves_once() -> None:
    stats = ModelStatistics("m", 1)
    first, second = RequestTimes(), RequestTimes()
    stats.enter_queue(first)
    stats.enter_queue(first)
    stats.enter_queue(second)
    assert stats.snapshot().pending_count == 2
    stats.leave_queue(first)
    stats.leave_queue(first)
    assert stats.snapshot().pending_count == 1 and not first.pending and second.pending
    stats.leave_queue(second)
    assert stats.snapshot().pending_count == 0


def test_observer_gets_each_success_in_microseconds() -> None:
    stats = ModelStatistics("m", 1)
    recorder = Recorder()
    stats.observer = recorder
    times = RequestTimes(received=1_000_000)
    times.stamp(3_000_000, 3_500_000, 9_500_000, 10_000_999)
    stats.record_success(1, times)
    assert recorder.seen == [
        ("request", 9000),
        ("queue", 2000),
        ("compute_input", 500),
        ("compute_infer", 6000),
        ("compute_output", 500),
    ]
    stats.record_cache_miss(7_000)
    assert recorder.seen[-1] == ("cache_miss", 7)
    stats.record_failure(RequestTimes())  # failures are not observed
    assert len(recorder.seen) == 6


def test_snapshot_is_a_copy() -> None:
    stats = ModelStatistics("m", 1)
    stats.load_ns = 1_500_000_000
    snapshot = stats.snapshot()
    stats.record_failure(RequestTimes())
    assert snapshot.inference["fail"].count == 0 and snapshot.load_ns == 1_500_000_000


def recorded(stats: ModelStatistics, count: int, batch_size: int) -> RequestTimes:
    """``count`` requests, each its own execution of ``batch_size`` rows, with known phases."""
    for index in range(count):
        times = RequestTimes(received=1_000 * index)
        times.stamp(
            1_000 * index + 30, 1_000 * index + 40, 1_000 * index + 100, 1_000 * index + 105
        )
        stats.record_execution(batch_size, times)
        stats.record_success(batch_size, times)
    return times


def test_sums_added_later_are_the_per_request_sums() -> None:
    # Successes and executions reach the sums in groups (at 256, and at each read): a read
    # sees every one recorded before it, summed as if each had been added on its own.
    stats = ModelStatistics("m", 1)
    recorded(stats, 300, 2)  # one group added on the way, 44 pending
    recorded(stats, 5, 3)
    entry = stats.to_json()
    assert entry["inference_count"] == 300 * 2 + 5 * 3 and entry["execution_count"] == 305
    assert entry["inference_stats"]["success"] == {"count": 305, "ns": 305 * 105}
    assert entry["inference_stats"]["queue"] == {"count": 305, "ns": 305 * 30}
    assert entry["inference_stats"]["compute_input"] == {"count": 305, "ns": 305 * 10}
    assert entry["inference_stats"]["compute_infer"] == {"count": 305, "ns": 305 * 60}
    assert entry["inference_stats"]["compute_output"] == {"count": 305, "ns": 305 * 5}
    batches = {b["batch_size"]: b for b in entry["batch_stats"]}
    assert batches[2]["compute_infer"] == {"count": 300, "ns": 300 * 60}
    assert batches[3]["compute_input"] == {"count": 5, "ns": 5 * 10}
    snapshot = stats.snapshot()
    recorded(stats, 1, 2)
    assert snapshot.inference["success"].count == 305  # a copy, taken when read
    assert stats.snapshot().inference["success"].count == 306


def test_last_inference_is_when_the_last_success_ended() -> None:
    stats = ModelStatistics("m", 1)
    times = RequestTimes()
    times.stamp(times.received, times.received, times.received, times.received)
    before_ms = time.time_ns() // 1_000_000
    stats.record_success(1, times)
    last = stats.to_json()["last_inference"]
    assert before_ms - 1_000 <= last <= time.time_ns() // 1_000_000
    stats.record_failure(RequestTimes())
    assert stats.to_json()["last_inference"] >= last
