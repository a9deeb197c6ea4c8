"""The server's registry of custom metrics (``pb_utils.MetricFamily``), read by ``/metrics``.

One registry per server process, as Triton has one Prometheus registry. Python models running
in-process update it directly; a stub process sends batches of operations (``apply``) under an
owner token, so that everything a stub created goes away with it (``drop_owner``).

As in Triton: a family is found again by name (a second one with another kind or description
is refused); metrics with the same labels in one family are one series, which lives until the
last ``Metric`` object that refers to it is deleted; a family stays listed (with no series)
once its metrics are gone.
"""

from __future__ import annotations

import bisect
import enum
import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

_log = logging.getLogger(__name__)


class MetricKind(enum.IntEnum):
    """The kind of a metric family (``pb_utils.MetricFamily.COUNTER`` ...)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


#: labels as a sorted tuple of (name, value) pairs: a series' identity within its family
LabelKey = tuple[tuple[str, str], ...]
#: one forwarded operation, e.g. ``("increment", metric_id, 1.0)`` (see ``apply``)
Operation = tuple[Any, ...]


@dataclass(slots=True)
class Series:
    """One labelled series of a family."""

    labels: LabelKey
    #: a counter's or gauge's value; a histogram's sum
    value: float = 0.0
    #: histogram upper bounds (sorted) and the observations counted in each (not cumulative)
    buckets: tuple[float, ...] = ()
    bucket_counts: list[int] = field(default_factory=list)
    count: int = 0
    refs: int = 0

    def observe(self, value: float) -> None:
        self.value += value
        self.count += 1
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.buckets):
            self.bucket_counts[index] += 1


@dataclass(slots=True)
class Family:
    """A metric family: its name, help text, kind and series."""

    name: str
    description: str
    kind: MetricKind
    series: dict[LabelKey, Series] = field(default_factory=dict)


class CustomMetricRegistry:
    """Every custom metric family of this process; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, Family] = {}
        self._owned_families: dict[tuple[Hashable, int], Family] = {}
        self._owned_series: dict[tuple[Hashable, int], tuple[Family, Series]] = {}

    # -- structure -----------------------------------------------------------------------------
    def new_family(
        self, owner: Hashable, family_id: int, name: str, description: str, kind: int
    ) -> None:
        """Register (or find) family ``name`` under ``owner``'s ``family_id``."""
        kind = MetricKind(kind)
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = Family(name, description, kind)
            elif family.kind != kind or family.description != description:
                raise ValueError(
                    f"metric family '{name}' already exists as a {family.kind.name.lower()} "
                    f"with description '{family.description}'"
                )
            self._owned_families[(owner, family_id)] = family

    def new_metric(
        self,
        owner: Hashable,
        metric_id: int,
        family_id: int,
        labels: dict[str, str],
        buckets: Sequence[float] | None = None,
    ) -> None:
        """Add (or share) the series of ``labels`` in the family, as ``metric_id``."""
        key: LabelKey = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        with self._lock:
            family = self._owned_families[(owner, family_id)]
            series = family.series.get(key)
            if series is None:
                bounds = tuple(sorted(buckets or ()))
                series = family.series[key] = Series(key, buckets=bounds)
                series.bucket_counts = [0] * len(bounds)
            series.refs += 1
            self._owned_series[(owner, metric_id)] = (family, series)

    def drop_metric(self, owner: Hashable, metric_id: int) -> None:
        """``metric_id`` was deleted: its series goes when no other metric refers to it."""
        with self._lock:
            self._release(owner, metric_id)

    def _release(self, owner: Hashable, metric_id: int) -> None:
        found = self._owned_series.pop((owner, metric_id), None)
        if found is None:
            return
        family, series = found
        series.refs -= 1
        if series.refs <= 0:
            family.series.pop(series.labels, None)

    def drop_owner(self, owner: Hashable) -> None:
        """Everything ``owner`` created is gone (its stub process ended)."""
        with self._lock:
            for key in [k for k in self._owned_series if k[0] == owner]:
                self._release(*key)
            for key in [k for k in self._owned_families if k[0] == owner]:
                del self._owned_families[key]

    # -- values --------------------------------------------------------------------------------
    def increment(self, owner: Hashable, metric_id: int, value: float) -> None:
        with self._lock:
            self._owned_series[(owner, metric_id)][1].value += value

    def set(self, owner: Hashable, metric_id: int, value: float) -> None:
        with self._lock:
            self._owned_series[(owner, metric_id)][1].value = value

    def observe(self, owner: Hashable, metric_id: int, values: Iterable[float]) -> None:
        with self._lock:
            series = self._owned_series[(owner, metric_id)][1]
            for value in values:
                series.observe(value)

    # -- batches from a stub -------------------------------------------------------------------
    def apply(self, owner: Hashable, operations: Sequence[Operation]) -> None:
        """Apply a stub's operations in order; a bad one is logged and skipped.

        ``("family", id, name, description, kind)``, ``("metric", id, family id, labels,
        buckets)``, ``("increment"|"set", metric id, value)``, ``("observe", metric id,
        [values])``, ``("drop", metric id)``.
        """
        for operation in operations:
            try:
                self._apply_one(owner, operation)
            except (KeyError, ValueError, TypeError) as exc:
                _log.error("custom metric operation %r failed: %s", operation[:2], exc)

    def _apply_one(self, owner: Hashable, operation: Operation) -> None:
        kind, *arguments = operation
        handlers: dict[str, Callable[..., None]] = {
            "family": self.new_family,
            "metric": self.new_metric,
            "increment": self.increment,
            "set": self.set,
            "observe": self.observe,
            "drop": self.drop_metric,
        }
        handler = handlers[kind]
        handler(owner, *arguments)

    # -- reading -------------------------------------------------------------------------------
    def families(self) -> list[Family]:
        """A copy of every family and its series, in creation order."""
        with self._lock:
            return [
                Family(
                    family.name,
                    family.description,
                    family.kind,
                    {
                        key: Series(key, s.value, s.buckets, list(s.bucket_counts), s.count, s.refs)
                        for key, s in family.series.items()
                    },
                )
                for family in self._families.values()
            ]

    def clear(self) -> None:
        """Forget everything (tests)."""
        with self._lock:
            self._families.clear()
            self._owned_families.clear()
            self._owned_series.clear()


#: the registry of this process
REGISTRY = CustomMetricRegistry()
