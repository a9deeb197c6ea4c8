"""Throughput and latency from two statistics snapshots; p99 from the metrics text."""

from __future__ import annotations

import asyncio
from typing import Any

from workbench.jupyter.stats import StatsSampler, parse_p99


def entry(success: int, success_ns: int, queue_ns: int = 0, fail: int = 0) -> dict[str, Any]:
    return {
        "name": "m",
        "version": "1",
        "inference_stats": {
            "success": {"count": success, "ns": success_ns},
            "fail": {"count": fail, "ns": 0},
            "queue": {"count": success, "ns": queue_ns},
            "compute_infer": {"count": success, "ns": success_ns - queue_ns},
        },
    }


class Feed:
    """Statistics snapshots and a clock the test advances."""

    def __init__(self, snapshots: list[list[dict[str, Any]]], metrics: str = "") -> None:
        self.snapshots, self.metrics, self.now = snapshots, metrics, 100.0

    async def stats(self) -> list[dict[str, Any]]:
        return self.snapshots.pop(0)

    async def text(self) -> str:
        return self.metrics

    def sampler(self, length: int = 300) -> StatsSampler:
        return StatsSampler(self.stats, self.text, length, clock=lambda: self.now)


def take(sampler: StatsSampler, feed: Feed, times: int) -> None:
    for _ in range(times):
        asyncio.run(sampler.sample())
        feed.now += 0.5


def test_two_snapshots_give_requests_per_second_and_latency_per_request() -> None:
    feed = Feed([[entry(10, 10_000_000)], [entry(20, 30_000_000, queue_ns=5_000_000, fail=1)]])
    sampler = feed.sampler()
    take(sampler, feed, 2)
    (row,) = sampler.as_json()["models"]
    sample = row["latest"]
    assert sample["requests_per_s"] == 20.0  # 10 more in 0.5 s
    assert sample["success"] == 10 and sample["fail"] == 1
    assert sample["latency_us"] == 2000.0  # 20 ms more over 10 requests
    assert sample["queue_us"] == 500.0
    assert row["statistics"]["inference_stats"]["success"]["count"] == 20


def test_an_idle_second_has_no_latency_and_a_reload_restarts_the_deltas() -> None:
    feed = Feed([[entry(5, 5_000)], [entry(5, 5_000)], [entry(1, 1_000)], [entry(3, 3_000)]])
    sampler = feed.sampler()
    take(sampler, feed, 4)
    samples = sampler.as_json()["models"][0]["samples"]
    assert [s["success"] for s in samples] == [0, 2]  # the counters restarting is skipped
    assert samples[0]["latency_us"] is None and samples[0]["requests_per_s"] == 0.0


def test_the_ring_keeps_the_last_samples_only() -> None:
    feed = Feed([[entry(i, i * 1000)] for i in range(10)])
    sampler = feed.sampler(length=3)
    take(sampler, feed, 10)
    assert [s["success"] for s in sampler.as_json(["m"])["models"][0]["samples"]] == [1, 1, 1]
    assert sampler.as_json(["other"]) == {"models": []}


def test_p99_comes_from_the_request_summary() -> None:
    text = "\n".join(
        [
            "# TYPE nv_inference_request_summary_us summary",
            'nv_inference_request_summary_us_count{model="m",version="1"} 4',
            'nv_inference_request_summary_us{model="m",version="1",quantile="0.5"} 100',
            'nv_inference_request_summary_us{model="m",version="1",quantile="0.99"} 250.5',
            'nv_inference_request_summary_us{model="idle",version="1",quantile="0.99"} NaN',
        ]
    )
    assert parse_p99(text) == {("m", "1"): 250.5}
    feed = Feed([[entry(1, 1000)], [entry(2, 2000)]], metrics=text)
    sampler = feed.sampler()
    take(sampler, feed, 2)
    assert sampler.as_json()["models"][0]["latest"]["p99_us"] == 250.5
