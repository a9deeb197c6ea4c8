"""``pb_utils.Logger`` and custom metrics (``pb_utils.MetricFamily``) for Python models.

Log lines go to the ``workbench.python_model`` logger (a stub forwards them to the server).
Metric operations are checked here, with Triton's messages, then handed to a ``MetricSink``:
in the server process that is the registry ``/metrics`` reads; in a stub process it is a
buffer that reaches the server with the next reply (``_stub_metrics``), so an update
costs no round trip. ``value()`` answers from this process's own copy of the value.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

from workbench.backends.python._model_errors import TritonModelException
from workbench.backends.python._server_metrics import REGISTRY, MetricKind

_log = logging.getLogger("workbench.python_model")


class LogLevel(enum.IntEnum):
    """Triton's python-model log levels."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


_LEVELS = {
    LogLevel.INFO: logging.INFO,
    LogLevel.WARNING: logging.WARNING,
    LogLevel.ERROR: logging.ERROR,
    LogLevel.VERBOSE: logging.DEBUG,
}


class Logger:
    """``pb_utils.Logger``: static methods, as in Triton."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        """Log ``message`` at ``level``."""
        _log.log(_LEVELS[LogLevel(level)], "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        """Log at INFO."""
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        """Log at WARNING."""
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        """Log at ERROR."""
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        """Log at VERBOSE (Python's DEBUG)."""
        Logger.log(message, LogLevel.VERBOSE)


class MetricError(TritonModelException, ValueError):
    """A refused metric operation (``TritonModelException``, as Triton raises)."""


class MetricSink(Protocol):
    """Where metric operations go (the server's registry, or a stub's forwarder)."""

    def new_family(self, family_id: int, name: str, description: str, kind: int) -> None: ...

    def new_metric(
        self, metric_id: int, family_id: int, labels: dict[str, str], buckets: list[float] | None
    ) -> None: ...

    def drop_metric(self, metric_id: int) -> None: ...

    def increment(self, metric_id: int, value: float) -> None: ...

    def set(self, metric_id: int, value: float) -> None: ...

    def observe(self, metric_id: int, value: float) -> None: ...


class RegistrySink:
    """Operations straight into this process's registry (in-process models)."""

    owner = "in-process"

    def new_family(self, family_id: int, name: str, description: str, kind: int) -> None:
        REGISTRY.new_family(self.owner, family_id, name, description, kind)

    def new_metric(
        self, metric_id: int, family_id: int, labels: dict[str, str], buckets: list[float] | None
    ) -> None:
        REGISTRY.new_metric(self.owner, metric_id, family_id, labels, buckets)

    def drop_metric(self, metric_id: int) -> None:
        REGISTRY.drop_metric(self.owner, metric_id)

    def increment(self, metric_id: int, value: float) -> None:
        REGISTRY.increment(self.owner, metric_id, value)

    def set(self, metric_id: int, value: float) -> None:
        REGISTRY.set(self.owner, metric_id, value)

    def observe(self, metric_id: int, value: float) -> None:
        REGISTRY.observe(self.owner, metric_id, (value,))


_sink: MetricSink = RegistrySink()
_ids = itertools.count(1)


def install_sink(sink: MetricSink) -> None:
    """Send the metric operations of this process to ``sink`` (a stub's forwarder)."""
    global _sink
    _sink = sink


class Metric:
    """One labelled series of a ``MetricFamily``."""

    def __init__(
        self, family: MetricFamily, labels: dict[str, str] | None, buckets: Sequence[float] | None
    ) -> None:
        _check_new_metric(family.kind, labels, buckets)
        self.family = family
        self.labels = {str(k): str(v) for k, v in (labels or {}).items()}
        self.buckets = sorted(buckets or [])
        self.id = next(_ids)
        self._value = 0.0
        self._lock = threading.Lock()
        self._sink = _sink
        self._sink.new_metric(self.id, family.id, self.labels, list(self.buckets) or None)

    def increment(self, value: float) -> None:
        """Add ``value`` (counters refuse negative values, as in Triton)."""
        kind = self.family.kind
        if kind == MetricKind.HISTOGRAM:
            raise MetricError(
                "Failed to increment metric value: "
                "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Increment"
            )
        if kind == MetricKind.COUNTER and value < 0:
            raise MetricError(
                "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only "
                "be incremented monotonically by non-negative values."
            )
        with self._lock:
            self._value += value
        self._sink.increment(self.id, float(value))

    def set(self, value: float) -> None:
        """Set a gauge to ``value``."""
        self._only(MetricKind.GAUGE, "set metric value", "Set")
        with self._lock:
            self._value = value
        self._sink.set(self.id, float(value))

    def observe(self, value: float) -> None:
        """Record ``value`` in a histogram."""
        self._only(MetricKind.HISTOGRAM, "observe metric value", "Observe")
        with self._lock:
            self._value += value
        self._sink.observe(self.id, float(value))

    def value(self) -> float:
        """The current value (counters and gauges)."""
        if self.family.kind == MetricKind.HISTOGRAM:
            raise MetricError(
                "Failed to get metric value: "
                "TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value"
            )
        return self._value

    def _only(self, kind: MetricKind, what: str, operation: str) -> None:
        if self.family.kind != kind:
            raise MetricError(
                f"Failed to {what}: TRITONSERVER_METRIC_KIND_{self.family.kind.name} "
                f"does not support {operation}"
            )

    def __del__(self) -> None:
        try:
            self._sink.drop_metric(self.id)
        except Exception:  # interpreter shutdown, a closed channel: nothing left to tell
            pass


def _check_new_metric(kind: MetricKind, labels: Any, buckets: Any) -> None:
    """Triton's checks when a metric is created."""
    if labels is not None and not isinstance(labels, dict):
        raise MetricError("Failed to create metric. Labels must be a dictionary.")
    if buckets is None:
        if kind == MetricKind.HISTOGRAM:
            raise MetricError("Failed to create metric. Missing required buckets.")
        return
    if not isinstance(buckets, list):
        raise MetricError("Failed to create metric. Buckets must be a list.")
    if kind != MetricKind.HISTOGRAM:
        raise MetricError("Failed to create metric. Unexpected buckets found.")


class MetricFamily:
    """``pb_utils.MetricFamily(name, description, kind)``; ``.Metric(labels)`` adds a series."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = MetricKind(kind)
        self.id = next(_ids)
        self.metrics: list[Metric] = []
        try:
            _sink.new_family(self.id, name, description, int(self.kind))
        except ValueError as exc:
            raise MetricError(f"Error when creating MetricFamily: {exc}") from None
        with _families_lock:
            METRIC_FAMILIES[name] = self

    def Metric(  # noqa: N802 - Triton's method name
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """A new series with ``labels`` (and histogram ``buckets``); as in Triton, the family
        keeps it alive, and it leaves ``/metrics`` once both are deleted."""
        metric = Metric(self, labels, buckets)
        self.metrics.append(metric)
        return metric


#: the last family created under each name in this process, while the model holds it
METRIC_FAMILIES: weakref.WeakValueDictionary[str, MetricFamily] = weakref.WeakValueDictionary()
_families_lock = threading.Lock()
