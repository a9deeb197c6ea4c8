"""The server-wide response cache gauges (Triton's local cache, ``nv_cache_*``)."""

from __future__ import annotations

from workbench.core.response_cache import ResponseCache
from workbench.server.metrics._exposition import MetricBlock

_GAUGES = (
    ("nv_cache_util", "Cache utilization [0.0 - 1.0]"),
    ("nv_cache_num_entries", "Number of responses stored in response cache"),
    ("nv_cache_num_hits", "Number of cache hits in response cache"),
    ("nv_cache_num_misses", "Number of cache misses in response cache"),
    ("nv_cache_num_lookups", "Number of cache lookups in response cache"),
    ("nv_cache_num_evictions", "Number of cache evictions in response cache"),
    ("nv_cache_lookup_duration", "Total cache lookup duration (hit and miss), in microseconds"),
    ("nv_cache_insertion_duration", "Total cache insertion duration, in microseconds"),
)


def cache_blocks(cache: ResponseCache | None) -> list[MetricBlock]:
    """The cache gauges, when the server runs with a response cache (else none)."""
    if cache is None:
        return []
    counters = cache.counters
    values = (
        cache.used_bytes / cache.size_bytes,
        len(cache),
        counters.hits,
        counters.misses,
        counters.lookups,
        counters.evictions,
        counters.lookup_ns // 1000,
        counters.insertion_ns // 1000,
    )
    blocks = []
    for (name, text), value in zip(_GAUGES, values, strict=True):
        block = MetricBlock(name, text, "gauge")
        block.add([], value)
        blocks.append(block)
    return blocks
