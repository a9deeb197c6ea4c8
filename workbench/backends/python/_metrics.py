"""``pb_utils.Logger`` and custom metrics for in-process Python models.

Minimal by design: log lines go to the ``workbench.python_model`` logger, and metric values
are kept in this process (``METRIC_FAMILIES``) for the server's metrics endpoint to export;
histograms keep a sum, a count and cumulative bucket counts.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Sequence

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


class MetricKind(enum.IntEnum):
    """The kind of a metric family."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class Metric:
    """One labelled series of a ``MetricFamily``."""

    def __init__(
        self, family: MetricFamily, labels: dict[str, str], buckets: Sequence[float] | None
    ) -> None:
        self.family = family
        self.labels = dict(labels)
        self.buckets = sorted(buckets or [])
        self.bucket_counts = [0] * len(self.buckets)
        self.count = 0
        self._value = 0.0
        self._lock = threading.Lock()

    def increment(self, value: float) -> None:
        """Add ``value`` (counters refuse negative values, as in Triton)."""
        if self.family.kind == MetricKind.COUNTER and value < 0:
            raise ValueError("TritonModelException: cannot increment a counter by a negative value")
        self._check(MetricKind.HISTOGRAM, "increment", allowed=False)
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        """Set a gauge to ``value``."""
        self._check(MetricKind.GAUGE, "set")
        with self._lock:
            self._value = value

    def observe(self, value: float) -> None:
        """Record ``value`` in a histogram."""
        self._check(MetricKind.HISTOGRAM, "observe")
        with self._lock:
            self._value += value
            self.count += 1
            for index, bound in enumerate(self.buckets):
                if value <= bound:
                    self.bucket_counts[index] += 1

    def value(self) -> float:
        """The current value (a histogram's sum)."""
        return self._value

    def _check(self, kind: MetricKind, op: str, *, allowed: bool = True) -> None:
        if (self.family.kind == kind) != allowed:
            raise ValueError(f"'{op}' is not supported for a {self.family.kind.name} metric")


class MetricFamily:
    """``pb_utils.MetricFamily(name, description, kind)``; ``.Metric(labels)`` adds a series."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        self.name = name
        self.description = description
        self.kind = MetricKind(kind)
        self.metrics: list[Metric] = []
        with _families_lock:
            METRIC_FAMILIES[name] = self

    def Metric(  # noqa: N802 - Triton's method name
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """A new series with ``labels`` (and histogram ``buckets``)."""
        if self.kind == MetricKind.HISTOGRAM and buckets is None:
            raise ValueError("histogram metrics need buckets")
        metric = Metric(self, labels or {}, buckets)
        self.metrics.append(metric)
        return metric


#: every family created by a model in this process, by name
METRIC_FAMILIES: dict[str, MetricFamily] = {}
_families_lock = threading.Lock()
