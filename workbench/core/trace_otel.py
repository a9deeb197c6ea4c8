"""The ``opentelemetry`` trace mode: spans exported over OTLP/HTTP, as Triton 2.51 exports them.

Mirrors ``TraceManager`` in opentelemetry mode (``src/tracer.cc``, ``src/tracer.h``,
``docs/user_guide/trace.md``; what tritonserver 2.51 was seen sending is in
``docs/triton-trace-facts.md``). One sampled front-end request makes:

- a root span ``InferRequest`` from when the request was sampled to when its trace is released
  (after the reply is sent), with the front end's timestamps as events (HTTP_RECV_START ...
  HTTP_SEND_END, GRPC_WAITREAD_START ... GRPC_SEND_END, INFER_RESPONSE_COMPLETE);
- per model request a span named after the model, from REQUEST_START to REQUEST_END, with the
  attributes ``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
  ``triton.trace_parent_id`` and ``triton.request_id`` (when there is one) and the events
  REQUEST_START, QUEUE_START, REQUEST_END; its parent is the root span, or for an ensemble's
  step the ensemble's model span;
- under each model span that executed a span ``compute`` from COMPUTE_START to COMPUTE_END with
  the four COMPUTE_* events.

Every span is of kind SERVER; the resource has ``service.name=triton-inference-server`` and the
``resource=key=value`` settings; the scope is ``triton-server``. Timestamps are the monotonic
ones the ``triton`` mode writes, moved to the wall clock by the offset between the two clocks
when the trace began (Triton's ``time_offset_``). A request carrying a valid W3C
``traceparent`` is traced whatever the rate and count say, under that parent.

The SDK is imported only when a server starts in this mode; its tracer provider is the
server's own (never the process-wide one, which a notebook's own instrumentation may use).
Spans are built once the request is answered; the SDK's batch span processor exports them
from its own thread. Their ids are chosen before: a Python model asks for its request's
context while it runs (``InferenceTrace.get_context``, Triton's
``{"traceparent":"00-<trace id>-<model span id>-01"}``), so a record picks the trace id (or
takes the propagated one) and each model span's id when first asked, and hands them to the
SDK's id generator when it builds the spans (``_PresetIds``).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from workbench._types import Tensor
from workbench.core.trace import InferenceTrace, RecordLifetime, TraceLevel
from workbench.errors import MissingDependencyError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import Span

log = logging.getLogger("workbench.core.trace")

OPENTELEMETRY_MODE = "opentelemetry"
#: where the OTLP/HTTP exporter sends spans when no ``url`` is given (OpenTelemetry's default)
DEFAULT_URL = "http://localhost:4318/v1/traces"
SERVICE_NAME = "triton-inference-server"
#: ``kTritonTracer``: the instrumentation scope of every span
TRACER_NAME = "triton-server"
ROOT_SPAN = "InferRequest"
COMPUTE_SPAN = "compute"
#: Triton's batch span processor settings (parsed into the config entries at start)
BSP_SETTINGS = ("bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size")


class SpanExport:
    """The server's tracer provider: OTLP/HTTP exporter behind a batch span processor, built
    from the ``--trace-config opentelemetry,<setting>=<value>`` entries (Triton's
    ``ProcessOpenTelemetryParameters``: ``url``, ``resource``, ``bsp_*``; others are kept for
    the setting API and otherwise ignored)."""

    def __init__(self, config: Sequence[tuple[str, str]]) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.sdk.trace.sampling import ALWAYS_ON
        except ImportError:
            raise MissingDependencyError("the OpenTelemetry SDK", "trace") from None
        url, resource, batching = _settings(config)
        # No url: the exporter's own default, which honours OTEL_EXPORTER_OTLP_*ENDPOINT as
        # Triton's exporter does.
        exporter = OTLPSpanExporter(endpoint=url) if url else OTLPSpanExporter()
        # ALWAYS_ON: a propagated parent that is not sampled is traced all the same (Triton
        # samples every request with a valid context).
        self._ids = _PresetIds()
        self._provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=Resource.create(resource),
            id_generator=cast("IdGenerator", self._ids),  # the SDK calls only its two methods
        )
        self._provider.add_span_processor(BatchSpanProcessor(exporter, **batching))
        self.tracer = self._provider.get_tracer(TRACER_NAME)

    def extract(self, carrier: Mapping[str, str]) -> Context | None:
        """The context a request propagates (``traceparent``/``tracestate``), None when it
        carries no valid one."""
        from opentelemetry.trace import get_current_span
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        context = TraceContextTextMapPropagator().extract(carrier)
        return context if get_current_span(context).get_span_context().is_valid else None

    def start(
        self,
        name: str,
        start_ns: int,
        parent: Span | Context | None,
        attributes: dict[str, Any] | None = None,
        ids: tuple[int, int] = (0, 0),
    ) -> Span:
        """A SERVER span starting at ``start_ns`` (wall clock) under ``parent`` (a span, a
        propagated context, or none: a new trace); ``ids``: the trace id (used only without
        a parent) and span id to give it, 0 for random ones."""
        from opentelemetry.context import Context
        from opentelemetry.trace import SpanKind, set_span_in_context

        if parent is None or isinstance(parent, Context):
            context = parent if parent is not None else Context()
        else:
            context = set_span_in_context(parent, Context())
        self._ids.preset(*ids)
        return self.tracer.start_span(
            name, context, kind=SpanKind.SERVER, attributes=attributes, start_time=start_ns
        )

    @staticmethod
    def trace_id_of(context: Context) -> int:
        """The trace id a propagated context carries."""
        from opentelemetry.trace import get_current_span

        trace_id: int = get_current_span(context).get_span_context().trace_id
        return trace_id

    def shutdown(self) -> None:
        """Export what is still queued and stop (Triton's ``CleanupTracer``)."""
        self._provider.shutdown()


class _PresetIds:
    """The SDK's id generator with ids chosen ahead: ``preset`` gives the next span started on
    this thread its trace id (taken only by a span without a parent) and span id; 0 (and any
    later span) draws them at random, as the SDK's ``RandomIdGenerator`` does."""

    def __init__(self) -> None:
        self._next = threading.local()

    def preset(self, trace_id: int, span_id: int) -> None:
        self._next.trace_id, self._next.span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        trace_id: int = getattr(self._next, "trace_id", 0)
        self._next.trace_id = 0
        return trace_id or _random_id(128)

    def generate_span_id(self) -> int:
        span_id: int = getattr(self._next, "span_id", 0)
        self._next.span_id = 0
        return span_id or _random_id(64)


def _random_id(bits: int) -> int:
    """A random non-zero id (zero is OpenTelemetry's invalid id)."""
    return random.getrandbits(bits) or 1


def _settings(config: Sequence[tuple[str, str]]) -> tuple[str, dict[str, str], dict[str, int]]:
    """(url, resource attributes, batch span processor keywords) from the config entries."""
    url = ""
    resource = {"service.name": SERVICE_NAME}
    numbers: dict[str, int] = {}
    for name, value in config:
        if name == "url":
            url = value
        elif name == "resource":
            # "key=value"; without "=" the whole text is both, as Triton's substr reads it
            key, equals, text = value.partition("=")
            resource[key] = text if equals else value
        elif name in BSP_SETTINGS:
            numbers[name] = int(value)
    return url, resource, _batching(numbers)


def _batching(numbers: dict[str, int]) -> dict[str, int]:
    """The SDK's ``BatchSpanProcessor`` keywords. The SDK refuses values Triton's C++ SDK
    takes (zero, a batch larger than the queue): those are brought into its range."""
    queue = max(1, numbers.get("bsp_max_queue_size", 2048))
    delay = max(1, numbers.get("bsp_schedule_delay", 5000))
    batch = min(max(1, numbers.get("bsp_max_export_batch_size", 512)), queue)
    used = {"bsp_max_queue_size": queue, "bsp_schedule_delay": delay}
    used["bsp_max_export_batch_size"] = batch
    changed = {name: value for name, value in used.items() if numbers.get(name, value) != value}
    if changed:
        log.warning("opentelemetry: %s brought into the SDK's range as %s", numbers, changed)
    return {
        "max_queue_size": queue,
        "schedule_delay_millis": delay,
        "max_export_batch_size": batch,
    }


@dataclass(slots=True)
class _TraceReport:
    """What one trace id reported: its model (with REQUEST_START) and activities in order."""

    parent_id: int
    attributes: dict[str, Any] | None = None
    model: str = ""
    activities: list[tuple[str, int]] = field(default_factory=list)


class SpanRecord(RecordLifetime):
    """The traces of one front-end request (and the requests it spawned) as spans, built when
    the request is released (``RecordLifetime``): a ``TraceRecorder`` for the opentelemetry
    mode."""

    def __init__(
        self,
        export: SpanExport,
        level: TraceLevel,
        ids: Iterator[int],
        context: Context | None = None,
    ) -> None:
        super().__init__()
        self.export = export
        self.level = level
        self._ids = ids
        self._context = context
        #: when the request was sampled: the root span starts here
        self.sampled_ns = time.monotonic_ns()
        #: wall clock minus monotonic clock, now
        self.offset_ns = time.time_ns() - self.sampled_ns
        self.root_events: list[tuple[str, int]] = []
        #: trace id -> its report, in creation order (an ensemble before its steps)
        self.reports: dict[int, _TraceReport] = {}
        #: the OpenTelemetry trace id (0: the propagated one, read when first needed) and each
        #: model span's id, chosen when first asked for (``context``) or when spans are built
        # Chosen now without a propagated context: two models asking at once (an ensemble's
        # steps) must get the same one.
        self._otel_trace_id = 0 if context is not None else _random_id(128)
        self._span_ids: dict[int, int] = {}

    def new_trace(self, parent_id: int = 0) -> InferenceTrace:
        trace = InferenceTrace(self, next(self._ids), parent_id)
        self.reports[trace.id] = _TraceReport(parent_id)
        return trace

    def timestamp(self, trace_id: int, name: str, ns: int) -> None:
        """A front end's timestamp: an event of the root span (Triton's ``CaptureTimestamp``)."""
        self.root_events.append((name, ns))

    def activity(self, trace_id: int, name: str, ns: int) -> None:
        self.reports[trace_id].activities.append((name, ns))

    def model(self, trace: InferenceTrace, model: str, version: int, request_id: str) -> None:
        attributes: dict[str, Any] = {
            "triton.model_name": model,
            "triton.model_version": version,
            "triton.trace_id": trace.id,
            "triton.trace_parent_id": trace.parent_id,
        }
        if request_id:
            attributes["triton.request_id"] = request_id
        report = self.reports[trace.id]
        report.model, report.attributes = model, attributes

    def tensor(self, trace_id: int, activity: str, tensor: Tensor) -> None:
        log.error("Tensor level tracing is not supported by the mode: %s", OPENTELEMETRY_MODE)

    def context(self, trace_id: int) -> str | None:
        """The context of ``trace_id``'s model span, as Triton 2.51's ``get_context`` gives it."""
        traceparent = f"00-{self._trace_id():032x}-{self._span_id(trace_id):016x}-01"
        return json.dumps({"traceparent": traceparent}, separators=(",", ":"))

    def _trace_id(self) -> int:
        if not self._otel_trace_id and self._context is not None:
            self._otel_trace_id = self.export.trace_id_of(self._context)  # the same each time
        return self._otel_trace_id

    def _span_id(self, trace_id: int) -> int:
        span_id = self._span_ids.get(trace_id)
        if span_id is None:  # setdefault: a racing first ask keeps the id the other one got
            span_id = self._span_ids.setdefault(trace_id, _random_id(64))
        return span_id

    def _write(self) -> None:
        """Build and end every span: the request has been answered."""
        root = self.export.start(
            ROOT_SPAN, self._wall(self.sampled_ns), self._context, ids=(self._trace_id(), 0)
        )
        for name, ns in self.root_events:
            root.add_event(name, timestamp=self._wall(ns))
        #: trace id -> its model span, the parent of the spans of requests it spawned
        model_spans: dict[int, Span] = {}
        for trace_id, report in self.reports.items():
            parent = model_spans.get(report.parent_id, root)
            self._report(trace_id, report, parent, model_spans)
        root.end(end_time=self._wall(time.monotonic_ns()))

    def _report(
        self, trace_id: int, report: _TraceReport, parent: Span, model_spans: dict[int, Span]
    ) -> None:
        """One trace id's activities, replayed as Triton's span stack takes them: a
        ``*_START`` of a request or compute opens a span under the one open, each activity is
        an event of the innermost open span, a ``*_END`` ends it."""
        stack = [parent]
        depth = len(stack)
        for name, ns in report.activities:
            wall = self._wall(ns)
            if name == "REQUEST_START":
                ids = (0, self._span_id(trace_id))
                span = self.export.start(report.model, wall, stack[-1], report.attributes, ids)
                model_spans[trace_id] = span
                stack.append(span)
            elif name == "COMPUTE_START":
                stack.append(self.export.start(COMPUTE_SPAN, wall, stack[-1]))
            stack[-1].add_event(name, timestamp=wall)
            if name in ("REQUEST_END", "COMPUTE_END") and len(stack) > depth:
                stack.pop().end(end_time=wall)
        for span in reversed(stack[depth:]):  # never ended (not expected): end them now
            span.end()

    def _wall(self, monotonic_ns: int) -> int:
        return monotonic_ns + self.offset_ns


__all__ = [
    "BSP_SETTINGS",
    "DEFAULT_URL",
    "OPENTELEMETRY_MODE",
    "SERVICE_NAME",
    "TRACER_NAME",
    "SpanExport",
    "SpanRecord",
]
