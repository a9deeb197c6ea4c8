"""What ``ModelStatistics`` keeps for the metrics endpoint: failure reasons, the pending
gauge, the load duration and the durations handed to an observer."""

from __future__ import annotations

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
