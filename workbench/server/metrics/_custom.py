"""Custom metric families of Python models (``pb_utils.MetricFamily``), by kind."""

from __future__ import annotations

from workbench.backends.python import CUSTOM_METRICS, MetricKind
from workbench.server.metrics._exposition import MetricBlock

_TYPES = {
    MetricKind.COUNTER: "counter",
    MetricKind.GAUGE: "gauge",
    MetricKind.HISTOGRAM: "histogram",
}


def custom_blocks() -> dict[str, list[MetricBlock]]:
    """Every custom family, grouped by Prometheus type, in creation order.

    A family is listed even when its metrics are gone (Triton keeps it registered).
    """
    grouped: dict[str, list[MetricBlock]] = {kind: [] for kind in _TYPES.values()}
    for family in CUSTOM_METRICS.families():
        kind = _TYPES[family.kind]
        block = MetricBlock(family.name, family.description, kind, always=True)
        for series in family.series.values():
            if family.kind == MetricKind.HISTOGRAM:
                block.add_histogram(
                    series.labels, series.count, series.value, series.buckets, series.bucket_counts
                )
            else:
                block.add(series.labels, series.value)
        grouped[kind].append(block)
    return grouped
