"""Recent throughput and latency per model: the statistics extension sampled every second.

Triton's ``/v2/models/stats`` holds totals since load; two snapshots a second apart give the
second's throughput (successful requests per second) and average latency, queue and compute
time per request. p99 comes from the metrics endpoint's ``nv_inference_request_summary_us``
(Triton's 60-second window; the extension starts the server with ``summary_latencies=true``),
and is None where the server does not publish it. Each model version keeps the last
``length`` samples in a ring buffer, so memory stays bounded however long Jupyter runs.
"""

from __future__ import annotations

import collections
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: one line of the request summary: labels, then the value
_SUMMARY = re.compile(r"^nv_inference_request_summary_us\{([^}]*)\}\s+(\S+)$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    """One second of one model version (durations in microseconds per request)."""

    time: float
    requests_per_s: float
    success: int
    fail: int
    latency_us: float | None
    queue_us: float | None
    compute_us: float | None
    p99_us: float | None


@dataclass(frozen=True)
class _Totals:
    time: float
    success: int
    fail: int
    success_ns: int
    queue_ns: int
    compute_ns: int

    @classmethod
    def of(cls, entry: Mapping[str, Any], now: float) -> _Totals:
        stats = entry.get("inference_stats", {})

        def count(key: str) -> int:
            return int(stats.get(key, {}).get("count", 0))

        def ns(*keys: str) -> int:
            return sum(int(stats.get(key, {}).get("ns", 0)) for key in keys)

        compute = ns("compute_input", "compute_infer", "compute_output")
        return cls(now, count("success"), count("fail"), ns("success"), ns("queue"), compute)


class StatsSampler:
    """Samples ``fetch_stats()`` (and ``fetch_metrics()``) into a ring buffer per model."""

    def __init__(
        self,
        fetch_stats: Callable[[], Awaitable[list[dict[str, Any]]]],
        fetch_metrics: Callable[[], Awaitable[str]],
        length: int = 300,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch_stats = fetch_stats
        self._fetch_metrics = fetch_metrics
        self._clock = clock
        self.length = length
        self._last: dict[tuple[str, str], _Totals] = {}
        #: the last statistics entry of each model version, as Triton gives it
        self.statistics: dict[tuple[str, str], dict[str, Any]] = {}
        self.samples: dict[tuple[str, str], collections.deque[Sample]] = {}

    async def sample(self) -> None:
        """Take one snapshot and add a sample per model version seen twice."""
        entries = await self._fetch_stats()
        p99 = parse_p99(await self._fetch_metrics())
        now = self._clock()
        for entry in entries:
            key = (str(entry.get("name", "")), str(entry.get("version", "")))
            totals = _Totals.of(entry, now)
            self.statistics[key] = entry
            previous, self._last[key] = self._last.get(key), totals
            if previous is None or totals.success < previous.success:
                continue  # first sight, or the model was reloaded (counters restarted)
            ring = self.samples.setdefault(key, collections.deque(maxlen=self.length))
            ring.append(_between(previous, totals, p99.get(key)))

    def as_json(self, models: Iterable[str] = ()) -> dict[str, Any]:
        """``{"models": [{"name", "version", "statistics", "latest", "samples"}]}`` for
        ``models`` (all by default): Triton's statistics entry, then samples oldest first."""
        wanted = set(models)
        rows = []
        for (name, version), entry in sorted(self.statistics.items()):
            if wanted and name not in wanted:
                continue
            samples = [asdict(s) for s in self.samples.get((name, version), ())]
            rows.append(
                {
                    "name": name,
                    "version": version,
                    "statistics": entry,
                    "latest": samples[-1] if samples else None,
                    "samples": samples,
                }
            )
        return {"models": rows}

    def clear(self) -> None:
        self._last.clear()
        self.statistics.clear()
        self.samples.clear()


def _between(before: _Totals, after: _Totals, p99: float | None) -> Sample:
    seconds = max(after.time - before.time, 1e-6)
    done = after.success - before.success

    def per_request(total_before: int, total_after: int) -> float | None:
        return (total_after - total_before) / done / 1000 if done else None

    return Sample(
        time=after.time,
        requests_per_s=done / seconds,
        success=done,
        fail=after.fail - before.fail,
        latency_us=per_request(before.success_ns, after.success_ns),
        queue_us=per_request(before.queue_ns, after.queue_ns),
        compute_us=per_request(before.compute_ns, after.compute_ns),
        p99_us=p99,
    )


def parse_p99(text: str) -> dict[tuple[str, str], float]:
    """``(model, version) -> p99 µs`` from Prometheus text (NaN windows left out)."""
    found = {}
    for match in _SUMMARY.finditer(text):
        labels = dict(_LABEL.findall(match.group(1)))
        if labels.get("quantile") not in ("0.99", "0.990"):
            continue
        try:
            value = float(match.group(2))
        except ValueError:
            continue
        if value == value:  # not NaN (an empty window)
            found[(labels.get("model", ""), labels.get("version", ""))] = value
    return found


__all__ = ["Sample", "StatsSampler", "parse_p99"]
