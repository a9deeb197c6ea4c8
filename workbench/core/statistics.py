"""Per model-version statistics in the shape of Triton's statistics extension.

Durations are nanoseconds, as Triton reports them. A ``Duration`` is a count and a sum; the
server layer renders them as ``{"count": n, "ns": total}``.

The Prometheus metrics endpoint reads the same counters (so the two always agree), plus what
only metrics report: failures by reason, the pending-request gauge, the load duration, and
each request's durations handed to an ``Observer`` (the latency summaries) when one is set.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

_PHASES = ("compute_input", "compute_infer", "compute_output")
_INFERENCE_FIELDS = ("success", "fail", "queue", *_PHASES, "cache_hit", "cache_miss")
#: Triton's failure reasons (``nv_inference_request_failure{reason=...}``)
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
#: what an ``Observer`` is told, per successful request (microseconds)
OBSERVED = ("request", "queue", *_PHASES, "cache_hit", "cache_miss")


class Observer(Protocol):
    """Receives each request's durations, in microseconds (the metrics' latency summaries)."""

    def observe(self, name: str, microseconds: float) -> None: ...


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
    #: counted in its model's pending-request gauge (queued, not executing yet)
    pending: bool = False
    input_done: int = 0
    infer_done: int = 0
    output_done: int = 0

    def stamp(self, started: int, input_done: int, infer_done: int, output_done: int) -> None:
        """Record the phases of the execution this request was part of."""
        self.started = started
        self.input_done = input_done
        self.infer_done = infer_done
        self.output_done = output_done


@dataclass(slots=True)
class StatsSnapshot:
    """A consistent copy of one version's counters (see ``ModelStatistics.snapshot``)."""

    inference_count: int
    execution_count: int
    #: the ``inference_stats`` durations by field (``success``, ``queue``, ``cache_hit``, ...)
    inference: dict[str, Duration]
    failures: dict[str, int]
    pending_count: int
    load_ns: int


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
        #: failed requests by Triton's reason; they add up to ``inference["fail"].count``
        self.failures: dict[str, int] = dict.fromkeys(FAILURE_REASONS, 0)
        #: requests queued for this version and not executing yet (Triton's pending count)
        self.pending_count = 0
        #: how long loading this version took (0 until it is loaded)
        self.load_ns = 0
        #: gets every successful request's durations (set by the metrics endpoint)
        self.observer: Observer | None = None
        #: what each success adds to, in the order ``record_success`` computes it
        self._per_request = tuple(self.inference[k] for k in ("success", "queue", *_PHASES))

    def enter_queue(self, times: RequestTimes) -> None:
        """A request starts waiting for an instance."""
        with self._lock:
            if not times.pending:
                times.pending = True
                self.pending_count += 1

    def leave_queue(self, *requests: RequestTimes) -> None:
        """Requests stop waiting: they execute, or ended while queued (idempotent)."""
        with self._lock:
            for times in requests:
                if times.pending:
                    times.pending = False
                    self.pending_count -= 1

    def record_execution(self, batch_size: int, times: RequestTimes) -> None:
        """One call into the backend that served ``batch_size`` inferences."""
        with self._lock:
            self.execution_count += 1
            per_phase = self.batches.get(batch_size)
            if per_phase is None:
                per_phase = self.batches[batch_size] = {p: Duration() for p in _PHASES}
            per_phase["compute_input"].add(times.input_done - times.started)
            per_phase["compute_infer"].add(times.infer_done - times.input_done)
            per_phase["compute_output"].add(times.output_done - times.infer_done)

    def record_success(self, batch_size: int, times: RequestTimes) -> None:
        """A request completed; its phases are attributed to it (Triton counts per request)."""
        durations = (
            times.output_done - times.received,
            times.started - times.received,
            times.input_done - times.started,
            times.infer_done - times.input_done,
            times.output_done - times.infer_done,
        )
        success, queue, compute_input, compute_infer, compute_output = self._per_request
        with self._lock:  # one request's five sums, written out: the hot path's every request
            self.inference_count += batch_size
            self.last_inference_ms = time.time_ns() // 1_000_000
            success.count += 1
            success.ns += durations[0]
            queue.count += 1
            queue.ns += durations[1]
            compute_input.count += 1
            compute_input.ns += durations[2]
            compute_infer.count += 1
            compute_infer.ns += durations[3]
            compute_output.count += 1
            compute_output.ns += durations[4]
        observer = self.observer
        if observer is not None:
            # OBSERVED starts with these five, in this order.
            for name, ns in zip(OBSERVED[:5], durations, strict=True):
                observer.observe(name, ns // 1000)

    def _observe(self, **durations_ns: int) -> None:
        observer = self.observer
        if observer is not None:
            for name, ns in durations_ns.items():
                observer.observe(name, ns // 1000)

    def record_cache_hit(self, times: RequestTimes, lookup_started: int, lookup_ns: int) -> None:
        """A request answered from the response cache: Triton counts a success and its queue
        time (until the lookup), but no inference, execution or compute (and it leaves
        ``last_inference`` alone)."""
        with self._lock:
            self.inference["success"].add(time.monotonic_ns() - times.received)
            self.inference["queue"].add(lookup_started - times.received)
            self.inference["cache_hit"].add(lookup_ns)
        self._observe(queue=lookup_started - times.received, cache_hit=lookup_ns)

    def record_cache_miss(self, ns: int) -> None:
        """A miss whose response was then stored (lookup plus insertion time)."""
        with self._lock:
            self.inference["cache_miss"].add(ns)
        self._observe(cache_miss=ns)

    def record_failure(self, times: RequestTimes, reason: str = "OTHER") -> None:
        """A failed request, with Triton's reason (``FAILURE_REASONS``)."""
        with self._lock:
            self.last_inference_ms = time.time_ns() // 1_000_000
            self.inference["fail"].add(time.monotonic_ns() - times.received)
            self.failures[reason if reason in self.failures else "OTHER"] += 1

    def snapshot(self) -> StatsSnapshot:
        """The counters the metrics endpoint reports, read together."""
        with self._lock:
            return StatsSnapshot(
                inference_count=self.inference_count,
                execution_count=self.execution_count,
                inference={k: Duration(d.count, d.ns) for k, d in self.inference.items()},
                failures=dict(self.failures),
                pending_count=self.pending_count,
                load_ns=self.load_ns,
            )

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


def failure_reason(error: BaseException) -> str:
    """Triton's failure reason for an error raised before the request executed.

    Errors name their reason with a ``failure_reason`` attribute (queue timeouts: REJECTED);
    cancellations are CANCELED; anything else is OTHER. Errors of the execution itself are
    BACKEND (the caller knows those).
    """
    reason = getattr(error, "failure_reason", None)
    if reason in FAILURE_REASONS:
        return str(reason)
    return "CANCELED" if getattr(error, "code", "") == "CANCELLED" else "OTHER"
