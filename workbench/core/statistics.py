"""Per model-version statistics in the shape of Triton's statistics extension.

Durations are nanoseconds, as Triton reports them. A ``Duration`` is a count and a sum; the
server layer renders them as ``{"count": n, "ns": total}``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

_PHASES = ("compute_input", "compute_infer", "compute_output")
_INFERENCE_FIELDS = ("success", "fail", "queue", *_PHASES, "cache_hit", "cache_miss")


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class RequestTimes:
    """Monotonic nanosecond timestamps of one request's journey through the server."""

    received: int = field(default_factory=time.monotonic_ns)
    #: when an instance picked the request up (end of queueing)
    started: int = 0
    input_done: int = 0
    infer_done: int = 0
    output_done: int = 0

    def stamp(self, started: int, input_done: int, infer_done: int, output_done: int) -> None:
        """Record the phases of the execution this request was part of."""
        self.started = started
        self.input_done = input_done
        self.infer_done = infer_done
        self.output_done = output_done


class ModelStatistics:
    """Counters for one model version; thread-safe (updated from the loop and workers)."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.inference: dict[str, Duration] = {key: Duration() for key in _INFERENCE_FIELDS}
        #: batch size -> phase -> Duration
        self.batches: dict[int, dict[str, Duration]] = {}

    def record_execution(self, batch_size: int, times: RequestTimes) -> None:
        """One call into the backend that served ``batch_size`` inferences."""
        phases = (
            times.input_done - times.started,
            times.infer_done - times.input_done,
            times.output_done - times.infer_done,
        )
        with self._lock:
            self.execution_count += 1
            per_phase = self.batches.setdefault(batch_size, {p: Duration() for p in _PHASES})
            for phase, ns in zip(_PHASES, phases, strict=True):
                per_phase[phase].add(ns)

    def record_success(self, batch_size: int, times: RequestTimes) -> None:
        """A request completed; its phases are attributed to it (Triton counts per request)."""
        with self._lock:
            self.inference_count += batch_size
            self.last_inference_ms = time.time_ns() // 1_000_000
            self.inference["success"].add(times.output_done - times.received)
            self.inference["queue"].add(times.started - times.received)
            self.inference["compute_input"].add(times.input_done - times.started)
            self.inference["compute_infer"].add(times.infer_done - times.input_done)
            self.inference["compute_output"].add(times.output_done - times.infer_done)

    def record_cache_hit(self, times: RequestTimes, lookup_started: int, lookup_ns: int) -> None:
        """A request answered from the response cache: Triton counts a success and its queue
        time (until the lookup), but no inference, execution or compute (and it leaves
        ``last_inference`` alone)."""
        with self._lock:
            self.inference["success"].add(time.monotonic_ns() - times.received)
            self.inference["queue"].add(lookup_started - times.received)
            self.inference["cache_hit"].add(lookup_ns)

    def record_cache_miss(self, ns: int) -> None:
        """A miss whose response was then stored (lookup plus insertion time)."""
        with self._lock:
            self.inference["cache_miss"].add(ns)

    def record_failure(self, times: RequestTimes) -> None:
        with self._lock:
            self.last_inference_ms = time.time_ns() // 1_000_000
            self.inference["fail"].add(time.monotonic_ns() - times.received)

    def to_json(self) -> dict[str, Any]:
        """Triton's ``model_stats`` entry for this version."""
        with self._lock:
            return {
                "name": self.name,
                "version": str(self.version),
                "last_inference": self.last_inference_ms,
                "inference_count": self.inference_count,
                "execution_count": self.execution_count,
                "inference_stats": {k: d.to_json() for k, d in self.inference.items()},
                "response_stats": {},
                "batch_stats": [
                    {"batch_size": size, **{p: d.to_json() for p, d in phases.items()}}
                    for size, phases in sorted(self.batches.items())
                ],
                "memory_usage": [],
            }


def empty_stats(name: str, version: int) -> dict[str, Any]:
    """Statistics of a version that has not served anything (or is not loaded)."""
    return ModelStatistics(name, version).to_json()
