"""Latency summaries (``--metrics-config summary_latencies=true``) as Triton computes them.

Triton's summaries (prometheus-cpp) report a total count and sum, and quantiles over a sliding
window of 60 s kept in 5 age buckets. Here each age bucket keeps its observations (a uniform
sample of at most ``_BUCKET_SAMPLES`` of them, so memory stays bounded under load) and a
quantile is read from the window's sorted samples, picking the element prometheus-cpp's
estimator picks when it holds every sample (``Nan`` for an empty window).
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Sequence

from workbench.core.statistics import Observer

MAX_AGE_S = 60.0
AGE_BUCKETS = 5
_BUCKET_SAMPLES = 4096

#: what ``ModelStatistics`` observes -> the summary family it feeds
SUMMARY_FAMILIES = {
    "request": "nv_inference_request_summary_us",
    "queue": "nv_inference_queue_summary_us",
    "compute_input": "nv_inference_compute_input_summary_us",
    "compute_infer": "nv_inference_compute_infer_summary_us",
    "compute_output": "nv_inference_compute_output_summary_us",
    "cache_hit": "nv_cache_hit_summary_per_model",
    "cache_miss": "nv_cache_miss_summary_per_model",
}


class Summary:
    """A count, a sum, and quantiles over the last ``MAX_AGE_S`` seconds; thread-safe."""

    def __init__(self, quantiles: Sequence[tuple[float, float]]) -> None:
        self.quantiles = [q for q, _ in quantiles]
        self.count = 0
        self.total = 0.0
        self._lock = threading.Lock()
        self._period = MAX_AGE_S / AGE_BUCKETS
        #: (start time, observations seen, kept samples) per age bucket, oldest first
        self._buckets: list[tuple[float, list[int], list[float]]] = []
        self._random = random.Random(0)

    def observe(self, value: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self.count += 1
            self.total += value
            seen, samples = self._current(now)
            seen[0] += 1
            if len(samples) < _BUCKET_SAMPLES:
                samples.append(value)
            else:  # reservoir sampling: every observation of the bucket equally likely kept
                slot = self._random.randrange(seen[0])
                if slot < _BUCKET_SAMPLES:
                    samples[slot] = value

    def _current(self, now: float) -> tuple[list[int], list[float]]:
        if not self._buckets or now - self._buckets[-1][0] >= self._period:
            self._buckets.append((now, [0], []))
            self._expire(now)
        _, seen, samples = self._buckets[-1]
        return seen, samples

    def _expire(self, now: float) -> None:
        while self._buckets and now - self._buckets[0][0] >= MAX_AGE_S:
            self._buckets.pop(0)

    def snapshot(self, now: float | None = None) -> tuple[int, float, list[tuple[float, float]]]:
        """(count, sum, [(quantile, value), ...]) as the summary reads now."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._expire(now)
            window = sorted(v for _, _, samples in self._buckets for v in samples)
            count, total = self.count, self.total
        return count, total, [(q, window_quantile(window, q)) for q in self.quantiles]


def window_quantile(ordered: Sequence[float], quantile: float) -> float:
    """The ``quantile`` of sorted samples as prometheus-cpp's CKMS estimator answers it when
    it holds every sample: the element at rank ``floor(q * n) - 1`` (clamped)."""
    if not ordered:
        return math.nan
    index = min(max(math.floor(quantile * len(ordered)) - 1, 0), len(ordered) - 1)
    return ordered[index]


class LatencySummaries(Observer):
    """The summaries of one model version; ``ModelStatistics`` feeds it (``observer``)."""

    def __init__(self, quantiles: Sequence[tuple[float, float]], cache_enabled: bool) -> None:
        names = ["queue", "compute_input", "compute_infer", "compute_output"]
        # Triton leaves the request summary out when the cache is on (it would mislead),
        # and adds the cache ones.
        names = [*names, "cache_hit", "cache_miss"] if cache_enabled else ["request", *names]
        self.summaries = {name: Summary(quantiles) for name in names}

    def observe(self, name: str, microseconds: float) -> None:
        summary = self.summaries.get(name)
        if summary is not None:
            summary.observe(microseconds)
