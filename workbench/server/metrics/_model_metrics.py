"""Per-model metrics, read from the same counters as the statistics extension.

A loaded version reports under ``{model, version}`` labels until it is unloaded, as Triton's
metric reporter does; names, help texts and types are Triton 2.51's (plus
``nv_model_load_duration_secs``, which later Triton releases added).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workbench.core.statistics import FAILURE_REASONS, StatsSnapshot
from workbench.server.metrics._config import ReporterConfig
from workbench.server.metrics._exposition import Labels, MetricBlock
from workbench.server.metrics._summary import SUMMARY_FAMILIES, LatencySummaries

_COUNTERS = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_request_failure": "Number of failed inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (does not include cached requests)",
    "nv_inference_exec_count": (
        "Number of model executions performed (does not include cached requests)"
    ),
}
_NOT_CACHED = "(does not include cached requests)"
#: latency counter -> (the ``inference_stats`` field it sums, help)
_LATENCY_COUNTERS = {
    "nv_inference_request_duration_us": (
        "success",
        "Cumulative inference request duration in microseconds (includes cached requests)",
    ),
    "nv_inference_queue_duration_us": (
        "queue",
        "Cumulative inference queuing duration in microseconds (includes cached requests)",
    ),
    "nv_inference_compute_input_duration_us": (
        "compute_input",
        f"Cumulative compute input duration in microseconds {_NOT_CACHED}",
    ),
    "nv_inference_compute_infer_duration_us": (
        "compute_infer",
        f"Cumulative compute inference duration in microseconds {_NOT_CACHED}",
    ),
    "nv_inference_compute_output_duration_us": (
        "compute_output",
        f"Cumulative inference compute output duration in microseconds {_NOT_CACHED}",
    ),
}
#: per-model cache counter -> (field, count or duration, help)
_CACHE_COUNTERS = {
    "nv_cache_num_hits_per_model": ("cache_hit", "count", "Number of cache hits per model"),
    "nv_cache_hit_duration_per_model": (
        "cache_hit",
        "us",
        "Total cache hit duration per model, in microseconds",
    ),
    "nv_cache_num_misses_per_model": ("cache_miss", "count", "Number of cache misses per model"),
    "nv_cache_miss_duration_per_model": (
        "cache_miss",
        "us",
        "Total cache miss (insert+lookup) duration per model, in microseconds",
    ),
}
PENDING = (
    "nv_inference_pending_request_count",
    "Instantaneous number of pending requests awaiting execution per-model.",
)
LOAD_DURATION = ("nv_model_load_duration_secs", "Model load time in seconds")
_SUMMARY_HELP = {
    "request": "Summary of inference request duration in microseconds (includes cached requests)",
    "queue": "Summary of inference queuing duration in microseconds (includes cached requests)",
    "compute_input": _LATENCY_COUNTERS["nv_inference_compute_input_duration_us"][1],
    "compute_infer": _LATENCY_COUNTERS["nv_inference_compute_infer_duration_us"][1],
    "compute_output": _LATENCY_COUNTERS["nv_inference_compute_output_duration_us"][1],
    "cache_hit": "Summary of cache hit counts/durations per model, in microseconds.",
    "cache_miss": "Summary of cache miss counts/durations per model, in microseconds.",
}


@dataclass(slots=True)
class VersionMetrics:
    """What one loaded version reports: its labels, counters and (maybe) summaries."""

    labels: Labels
    stats: StatsSnapshot
    cache_enabled: bool
    summaries: LatencySummaries | None


class ModelMetricBlocks:
    """The per-model families, filled from every loaded version."""

    def __init__(self, config: ReporterConfig) -> None:
        self.config = config
        self.counters = [MetricBlock(name, text, "counter") for name, text in _COUNTERS.items()]
        self.latency = [
            MetricBlock(name, text, "counter") for name, (_, text) in _LATENCY_COUNTERS.items()
        ]
        self.cache = [
            MetricBlock(name, text, "counter") for name, (_, _, text) in _CACHE_COUNTERS.items()
        ]
        self.pending = MetricBlock(*PENDING, "gauge")
        self.load_duration = MetricBlock(*LOAD_DURATION, "gauge")
        self.summaries = {
            name: MetricBlock(family, _SUMMARY_HELP[name], "summary")
            for name, family in SUMMARY_FAMILIES.items()
        }

    def add_all(self, versions: Iterable[VersionMetrics]) -> None:
        for version in versions:
            self.add(version)

    def add(self, version: VersionMetrics) -> None:
        labels, stats = version.labels, version.stats
        success, failure, count, executions = self.counters
        success.add(labels, stats.inference["success"].count)
        for reason in FAILURE_REASONS:
            failure.add(_sorted([*labels, ("reason", reason)]), stats.failures[reason])
        count.add(labels, stats.inference_count)
        executions.add(labels, stats.execution_count)
        if self.config.counter_latencies:
            for block, (field, _) in zip(self.latency, _LATENCY_COUNTERS.values(), strict=True):
                block.add(labels, stats.inference[field].ns // 1000)
            if version.cache_enabled:
                for block, (field, unit, _) in zip(
                    self.cache, _CACHE_COUNTERS.values(), strict=True
                ):
                    duration = stats.inference[field]
                    block.add(labels, duration.count if unit == "count" else duration.ns // 1000)
        self.pending.add(labels, stats.pending_count)
        self.load_duration.add(labels, stats.load_ns / 1e9)
        if version.summaries is not None:
            for name, summary in version.summaries.summaries.items():
                self.summaries[name].add_summary(labels, *summary.snapshot())

    def counter_blocks(self) -> list[MetricBlock]:
        return [*self.counters, *self.latency, *self.cache]

    def gauge_blocks(self) -> list[MetricBlock]:
        return [self.pending, self.load_duration]

    def summary_blocks(self) -> list[MetricBlock]:
        return list(self.summaries.values())


def _sorted(labels: Labels) -> Labels:
    return sorted(labels)
