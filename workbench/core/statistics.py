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
from operator import attrgetter
from typing import Any, Protocol

_PHASES = ("compute_input", "compute_infer", "compute_output")
_INFERENCE_FIELDS = ("success", "fail", "queue", *_PHASES, "cache_hit", "cache_miss")
#: Triton's failure reasons (``nv_inference_request_failure{reason=...}``)
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
#: what an ``Observer`` is told, per successful request (microseconds)
OBSERVED = ("request", "queue", *_PHASES, "cache_hit", "cache_miss")
#: executions or successes kept before they are added to the sums (a read adds them at once)
_ADD_EVERY = 256


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


#: a request's timestamps that its durations are differences of, in ``_sums``' order
_STAMPS = tuple(
    attrgetter(name) for name in ("received", "started", "input_done", "infer_done", "output_done")
)


def _sums(requests: list[RequestTimes]) -> list[int]:
    """Each of ``_STAMPS`` summed over ``requests``, with no Python frame per request."""
    return [sum(map(stamp, requests)) for stamp in _STAMPS]


def _durations(
    received: int, started: int, input_done: int, infer_done: int, output_done: int
) -> tuple[int, int, int, int, int]:
    """Request, queue and the three compute phases, from a request's timestamps (or their
    sums over many requests: the sums of the durations)."""
    return (
        output_done - received,
        started - received,
        input_done - started,
        infer_done - input_done,
        output_done - infer_done,
    )


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
        #: what each success adds to, in the order ``_add_recorded`` computes it
        self._per_request = tuple(self.inference[k] for k in ("success", "queue", *_PHASES))
        #: executions (batch size, times) and successes recorded but not yet in the sums
        self._executed: list[tuple[int, RequestTimes]] = []
        self._succeeded: list[RequestTimes] = []

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
        """One call into the backend that served ``batch_size`` inferences (its phases are
        added to the sums later, as a success's are)."""
        with self._lock:
            self.execution_count += 1
            executed = self._executed
            executed.append((batch_size, times))
            if len(executed) >= _ADD_EVERY:
                self._add_recorded()

    def record_success(self, batch_size: int, times: RequestTimes) -> None:
        """A request completed; its phases are attributed to it (Triton counts per request).

        Its durations are added to the sums later, many requests at once (``_add_recorded``,
        before any read): a request costs the loop an append, not five sums."""
        with self._lock:
            self.inference_count += batch_size
            succeeded = self._succeeded
            succeeded.append(times)
            if len(succeeded) >= _ADD_EVERY:
                self._add_recorded()
        observer = self.observer
        if observer is not None:
            durations = _durations(
                times.received, times.started, times.input_done, times.infer_done, times.output_done
            )
            # OBSERVED starts with these five, in this order.
            for name, ns in zip(OBSERVED[:5], durations, strict=True):
                observer.observe(name, ns // 1000)

    def _add_recorded(self) -> None:
        """Add the executions and successes recorded since the last call to the sums (the
        lock held). Each timestamp is summed over many requests in C (``_sums``): the
        durations are differences of those sums."""
        executed, self._executed = self._executed, []
        if executed:
            self._add_executions(executed)
        succeeded, self._succeeded = self._succeeded, []
        if succeeded:
            for duration, ns in zip(self._per_request, _durations(*_sums(succeeded)), strict=True):
                duration.add(ns, len(succeeded))
            # the last success's end in wall-clock milliseconds (a failure since may be later)
            ended_ns = succeeded[-1].output_done + time.time_ns() - time.monotonic_ns()
            self.last_inference_ms = max(self.last_inference_ms, ended_ns // 1_000_000)

    def _add_executions(self, executed: list[tuple[int, RequestTimes]]) -> None:
        """The compute phases of ``executed``, per batch size (the lock held)."""
        by_size: dict[int, list[RequestTimes]] = {}
        for batch_size, times in executed:
            same = by_size.get(batch_size)
            if same is None:
                by_size[batch_size] = [times]
            else:
                same.append(times)
        for batch_size, same in by_size.items():
            per_phase = self.batches.get(batch_size)
            if per_phase is None:
                per_phase = self.batches[batch_size] = {p: Duration() for p in _PHASES}
            phases = _durations(*_sums(same))[2:]
            for phase, ns in zip(_PHASES, phases, strict=True):
                per_phase[phase].add(ns, len(same))

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
            self.last_inference_ms = max(self.last_inference_ms, time.time_ns() // 1_000_000)
            self.inference["fail"].add(time.monotonic_ns() - times.received)
            self.failures[reason if reason in self.failures else "OTHER"] += 1

    def snapshot(self) -> StatsSnapshot:
        """The counters the metrics endpoint reports, read together."""
        with self._lock:
            self._add_recorded()
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
            self._add_recorded()
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
