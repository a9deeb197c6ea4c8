"""Trace settings, sampling and batching: Triton 2.51's ``TraceManager`` (``src/tracer.cc``).

- The server starts with one setting (``--trace-config``: ``TraceOptions``); the trace
  extension updates the global setting or a model's. A model's setting specifies some fields
  and takes the others from the global setting, also after the global setting changes; a
  field set to ``null`` is cleared (it falls back again), and a model with no field left
  uses the global setting itself. A cleared global field returns to its start-up value.
- Every update makes a new setting with fresh counters (Triton replaces the object), so a
  ``trace_count`` starts again, and the replaced setting writes what it still holds.
- Sampling (``TraceSetting.sample``): every ``rate``-th request of the setting is traced
  while ``count`` (-1: no limit) is not used up; ``count`` counts down, which is what a
  ``GET`` then shows. A setting is invalid (samples nothing) when tracing is off, the rate
  is 0, the file name is empty (``triton`` mode), or the count is used up; an update may only
  make an invalid setting when it turns tracing off ("Attempting to set invalid trace setting
  :<reason>"). In ``opentelemetry`` mode a request that propagates a valid W3C trace context
  is traced whatever the rate and count say (``force``), while its setting's level is on.
- ``triton`` mode: traces are kept in the setting and written (``TraceFile``) to
  ``<file>.<index>`` when ``log_frequency`` of them are collected, or when the count is used
  up and every sampled request was collected; otherwise when the setting is replaced or
  tracing stops, to ``<file>`` itself (or an indexed file when ``log_frequency`` is set).
- ``opentelemetry`` mode: each trace's spans are exported when it is released
  (``trace_otel``); ``log_frequency`` is kept but unused, and there is no file.

Everything here runs on the server's event loop (the front ends sample and release there).
What real Triton was seen doing is in ``docs/triton-trace-facts.md``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from workbench.core.trace import InferenceTrace, TraceLevel, TraceRecord
from workbench.core.trace_file import TraceFile
from workbench.core.trace_otel import OPENTELEMETRY_MODE, SpanExport, SpanRecord
from workbench.errors import InvalidArgumentError

#: the fields a setting may specify (the file only at start-up: it cannot be updated)
FIELDS = ("level", "rate", "count", "log_frequency")
#: ``TraceManager::MIN_TRACE_COUNT_VALUE``
MIN_TRACE_COUNT = -1
TRITON_MODE = "triton"


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """The start-up setting (``--trace-config``), with tritonserver's defaults."""

    level: TraceLevel = TraceLevel.OFF
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = TRITON_MODE
    #: the mode's own ``--trace-config <mode>,<setting>=<value>`` entries as the setting API
    #: lists them (values as strings, in their order; ``file`` and ``log-frequency`` aside)
    config: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class NewSetting:
    """What one update asks for (Triton's ``TraceManager::NewSetting``): a value for a field
    sets it; a field in ``clear`` falls back; anything else keeps what it was."""

    level: TraceLevel | None = None
    rate: int | None = None
    count: int | None = None
    log_frequency: int | None = None
    clear: frozenset[str] = frozenset()


@dataclass(eq=False, slots=True)
class TraceSetting:
    """One setting's values, which of them it specifies, and the traces it collected."""

    level: TraceLevel
    rate: int
    #: traces still to take; -1: no limit
    count: int
    log_frequency: int
    file: TraceFile
    mode: str = TRITON_MODE
    config: tuple[tuple[str, str], ...] = ()
    specified: frozenset[str] = frozenset()
    #: requests counted for the rate, traces collected, traces not written yet
    sampled: int = field(default=0, init=False)
    collected: int = field(default=0, init=False)
    _batch: list[str] = field(default_factory=list, init=False)
    #: replaced or stopped: what still arrives is written at once
    retired: bool = field(default=False, init=False)

    @property
    def reason(self) -> str:
        """Why the setting is invalid, "" when it is not (the count aside)."""
        if not self.level:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if self.mode == TRITON_MODE and not self.file.name:
            return "trace file name is not given"
        return ""

    def valid(self) -> bool:
        return not self.reason and self.count != 0

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced (``TraceSetting::SampleTrace``); ``force``: it
        propagates a trace context, so it is traced in any case (and still counted)."""
        if self.rate == 0 or (not self.valid() and not force):
            return force
        self.sampled += 1
        hit = self.sampled % self.rate == 0 and self.count != 0
        if hit and self.count > 0:
            self.count -= 1
        return hit or force

    def write_trace(self, text: str) -> None:
        """Keep one finished trace; write the batch when it is due."""
        self._batch.append(text)
        self.collected += 1
        used_up = self.count == 0 and self.collected == self.sampled
        if used_up or (self.log_frequency and len(self._batch) >= self.log_frequency):
            self._flush(indexed=True)
        elif self.retired:
            self._flush(indexed=self.log_frequency != 0)

    def retire(self) -> None:
        """The setting was replaced or tracing stops: write what it holds."""
        self.retired = True
        self._flush(indexed=self.log_frequency != 0)

    def _flush(self, indexed: bool) -> None:
        batch, self._batch = self._batch, []
        if batch and self.mode == TRITON_MODE:
            self.file.save(",".join(batch), indexed)


class TraceManager:
    """The server's trace settings: the extension reads and updates them, front ends sample."""

    def __init__(self, options: TraceOptions | None = None) -> None:
        options = options or TraceOptions()
        self.file = TraceFile(options.file)
        start = TraceSetting(
            options.level,
            options.rate,
            options.count,
            options.log_frequency,
            self.file,
            options.mode,
            options.config,
        )
        #: what a cleared global field returns to
        self._default = start
        self._global = replace(start)
        self._models: dict[str, TraceSetting] = {}
        #: models whose setting takes some fields from the global one
        self._fallback: set[str] = set()
        self._ids = itertools.count(1)
        #: whether any setting traces: the one check a request pays while tracing is off
        self.enabled = bool(options.level)
        #: opentelemetry mode: the exporter (the SDK is imported here, at start)
        self._export = SpanExport(options.config) if options.mode == OPENTELEMETRY_MODE else None

    @property
    def mode(self) -> str:
        return self._global.mode

    def setting(self, model: str = "") -> TraceSetting:
        """The setting requests for ``model`` are sampled under ("" : the global one)."""
        return self._models.get(model, self._global) if model else self._global

    @property
    def propagates(self) -> bool:
        """Whether requests' trace context headers matter (opentelemetry mode): a front end
        passes them to ``sample`` only then."""
        return self._export is not None

    def sample(self, model: str, carrier: Mapping[str, str] | None = None) -> InferenceTrace | None:
        """A new trace for a request to ``model``, or None when it is not sampled.
        ``carrier``: the request's headers (``traceparent``, ``tracestate``)."""
        setting = self._models.get(model, self._global)
        if self._export is None:
            if not setting.sample():
                return None
            return TraceRecord(setting, setting.level, self._ids).new_trace()
        context = self._export.extract(carrier) if carrier and setting.level else None
        if not setting.sample(force=context is not None):
            return None
        return SpanRecord(self._export, setting.level, self._ids, context).new_trace()

    def update(self, model: str, new: NewSetting) -> None:
        """Apply ``new`` to ``model``'s setting ("": the global one, then to every model
        setting that takes fields from it); raises Triton's error for an invalid result."""
        try:
            self._update(model, new)
            if not model:
                for name in sorted(self._fallback):
                    self._update(name, NewSetting())
        finally:
            self.enabled = any(s.level for s in (self._global, *self._models.values()))

    def _update(self, model: str, new: NewSetting) -> None:
        current = self._models.get(model) if model else self._global
        fallback = self._global if model else self._default
        values = {name: getattr(fallback, name) for name in FIELDS}
        specified = set()
        for name in FIELDS:
            given = getattr(new, name)
            if name in new.clear:
                continue
            if given is not None:
                values[name] = given
            elif current is not None and name in current.specified:
                values[name] = getattr(current, name)
            else:
                continue
            specified.add(name)
        if model:
            if not specified:
                self._retire(self._models.pop(model, None))
                self._fallback.discard(model)
                return
            self._fallback.add(model)  # the file is never specified, so some field falls back
        setting = TraceSetting(
            file=self.file,
            mode=fallback.mode,
            config=fallback.config,
            specified=frozenset(specified),
            **values,
        )
        if not setting.valid() and setting.level:
            raise InvalidArgumentError(f"Attempting to set invalid trace setting :{setting.reason}")
        if model:
            self._retire(self._models.get(model))
            self._models[model] = setting
        else:
            self._retire(self._global)
            self._global = setting

    @staticmethod
    def _retire(setting: TraceSetting | None) -> None:
        if setting is not None:
            setting.retire()

    def close(self) -> None:
        """Tracing stops (server shutdown): every setting writes what it holds, then the
        trace file gets its closing ``]``."""
        self.enabled = False
        for setting in (*self._models.values(), self._global):
            setting.retire()
        self.file.close()
        if self._export is not None:
            self._export.shutdown()  # the spans still queued are exported


__all__ = [
    "FIELDS",
    "MIN_TRACE_COUNT",
    "OPENTELEMETRY_MODE",
    "TRITON_MODE",
    "NewSetting",
    "TraceManager",
    "TraceOptions",
    "TraceSetting",
]
