"""Server-side per-request times from two statistics snapshots."""

from __future__ import annotations

import math

from workbench.bench.server_stats import StatsSnapshot


def reply(
    success: int, queue_ns: int, infer_ns: int, other: str = "v", executions: int = 0
) -> dict:
    phases = {
        "success": {"count": success, "ns": 0},
        "queue": {"count": success, "ns": queue_ns},
        "compute_input": {"count": success, "ns": 0},
        "compute_infer": {"count": success, "ns": infer_ns},
        "compute_output": {"count": success, "ns": 0},
    }
    return {
        "model_stats": [
            {
                "name": "m",
                "version": "1",
                "inference_count": success,
                "execution_count": executions,
                "inference_stats": phases,
            },
            {"name": "m", "version": "2", "inference_stats": {"success": {"count": 1}}},
            {"name": other, "version": "1", "inference_stats": phases},
        ]
    }


def test_delta_per_request_in_microseconds() -> None:
    before = StatsSnapshot.from_response(reply(10, 1_000_000, 5_000_000), "m")
    after = StatsSnapshot.from_response(reply(30, 3_000_000, 25_000_000), "m")
    assert after.successes_since(before) == 20
    times = after.per_request_us(before)
    assert times["queue_us"] == 100.0
    assert times["compute_infer_us"] == 1000.0
    assert times["compute_input_us"] == 0.0


def test_versions_are_summed_and_other_models_ignored() -> None:
    snapshot = StatsSnapshot.from_response(reply(10, 0, 0), "m")
    assert snapshot.success == 11


def test_no_request_in_the_window_is_nan() -> None:
    snapshot = StatsSnapshot.from_response(reply(10, 1000, 1000), "m")
    assert all(math.isnan(v) for v in snapshot.per_request_us(snapshot).values())


def test_average_batch_is_inferences_per_execution_in_the_window() -> None:
    before = StatsSnapshot.from_response(reply(10, 0, 0, executions=10), "m")
    after = StatsSnapshot.from_response(reply(40, 0, 0, executions=16), "m")
    assert after.avg_batch(before) == 5.0  # 30 inferences in 6 executions
    assert math.isnan(after.avg_batch(after))
