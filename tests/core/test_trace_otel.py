"""The opentelemetry mode's spans, exported over OTLP/HTTP to a receiver on loopback.

The span names, attributes, events and nesting are those tritonserver 2.51 sends (seen on it,
``docs/triton-trace-facts.md``; ``tests/integration/test_conformance_trace_otel.py`` compares
both side by side).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.server.otlp_receiver import OtlpReceiver, ReceivedSpan, children, roots
from workbench.core.statistics import RequestTimes
from workbench.core.trace import InferenceTrace, TraceLevel
from workbench.core.trace_otel import SpanExport, SpanRecord
from workbench.core.trace_settings import TraceManager, TraceOptions
from workbench.errors import MissingDependencyError

pytest.importorskip("opentelemetry.sdk")

SERVER = 2  # SpanKind.SERVER in OTLP
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def export_to(receiver: OtlpReceiver, *config: tuple[str, str]) -> SpanExport:
    return SpanExport([("url", receiver.url), ("bsp_schedule_delay", "20"), *config])


def times(base: int) -> RequestTimes:
    return RequestTimes(
        received=base + 20,
        started=base + 30,
        input_done=base + 40,
        infer_done=base + 50,
        output_done=base + 60,
    )


def by_name(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


def test_a_request_makes_a_root_a_model_and_a_compute_span(receiver: OtlpReceiver) -> None:
    export = export_to(receiver, ("resource", "deployment=test"))
    record = SpanRecord(export, TraceLevel.TIMESTAMPS, itertools.count(1))
    trace = record.new_trace()
    base = trace.started_ns
    trace.capture("HTTP_RECV_START", base - 5)
    trace.report_request("add_one", 1, "r1", times(base))
    trace.capture("HTTP_SEND_END", base + 100)
    trace.release()
    export.shutdown()
    spans = receiver.wait_for(3)
    root, model, compute = (by_name(spans, n) for n in ("InferRequest", "add_one", "compute"))
    assert (root.parent_id, model.parent_id, compute.parent_id) == (
        "",
        root.span_id,
        model.span_id,
    )
    assert {s.kind for s in spans} == {SERVER}
    assert {s.scope for s in spans} == {"triton-server"}
    assert root.resource["service.name"] == "triton-inference-server"
    assert root.resource["deployment"] == "test"
    assert root.event_names == ["HTTP_RECV_START", "HTTP_SEND_END"]
    assert root.attributes == {}
    assert model.attributes == {
        "triton.model_name": "add_one",
        "triton.model_version": 1,
        "triton.trace_id": 1,
        "triton.trace_parent_id": 0,
        "triton.request_id": "r1",
    }
    assert model.event_names == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert compute.event_names == [
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
    ]
    # the monotonic timestamps the triton mode writes, moved to the wall clock by one offset
    offset = record.offset_ns
    assert [ns - offset for _, ns in compute.events] == [base + 30, base + 40, base + 50, base + 60]
    assert (model.start_ns, compute.start_ns, compute.end_ns) == (
        base + offset,
        base + 30 + offset,
        base + 60 + offset,
    )
    assert model.end_ns == model.events[-1][1]
    assert root.start_ns <= model.start_ns and model.end_ns <= root.end_ns


def _ensemble_spans(
    receiver: OtlpReceiver, while_running: Callable[[list[InferenceTrace]], None]
) -> list[ReceivedSpan]:
    """The spans of an ensemble ``ens`` (trace 7) with steps ``first`` and ``second`` (8, 9);
    ``while_running`` sees the steps' traces before they report."""
    export = export_to(receiver)
    record = SpanRecord(export, TraceLevel.TIMESTAMPS, itertools.count(7))
    ensemble = record.new_trace()
    steps = [ensemble.spawn(), ensemble.spawn()]
    while_running(steps)
    for step, name in zip(steps, ("first", "second"), strict=True):
        step.report_request(name, 3, "e1", times(step.started_ns))
    ensemble.report_request("ens", 1, "e1", times(ensemble.started_ns), compute=False)
    ensemble.release()
    export.shutdown()
    return receiver.wait_for(6)


def test_an_ensembles_steps_are_spans_under_the_ensembles_model_span(
    receiver: OtlpReceiver,
) -> None:
    spans = _ensemble_spans(receiver, lambda steps: None)
    (root,) = roots(spans)
    (ens,) = children(spans, root)
    assert ens.name == "ens" and ens.event_names == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
    assert sorted(s.name for s in children(spans, ens)) == ["first", "second"]
    first = by_name(spans, "first")
    assert first.attributes == {
        "triton.model_name": "first",
        "triton.model_version": 3,
        "triton.trace_id": 8,
        "triton.trace_parent_id": 7,
        "triton.request_id": "e1",
    }
    assert [s.name for s in children(spans, first)] == ["compute"]
    assert len({s.trace_id for s in spans}) == 1


def test_each_steps_context_names_its_own_model_span_in_the_one_trace(
    receiver: OtlpReceiver,
) -> None:
    # get_context() from two steps of an ensemble, asked from two threads at once: one trace
    # id for both (the root's), each step its own model span.
    contexts: list[Any] = []

    def ask(steps: list[InferenceTrace]) -> None:
        with ThreadPoolExecutor(2) as pool:
            contexts.extend(pool.map(lambda step: json.loads(step.get_context()), steps))

    spans = _ensemble_spans(receiver, ask)
    for context, name in zip(contexts, ("first", "second"), strict=True):
        span = by_name(spans, name)
        assert context == {"traceparent": f"00-{span.trace_id}-{span.span_id}-01"}


def test_a_request_without_an_id_has_no_request_id_attribute(receiver: OtlpReceiver) -> None:
    export = export_to(receiver)
    trace = SpanRecord(export, TraceLevel.TIMESTAMPS, itertools.count(1)).new_trace()
    trace.report_request("m", 1, "", RequestTimes(received=trace.started_ns))
    trace.release()
    export.shutdown()
    model = by_name(receiver.wait_for(2), "m")
    assert "triton.request_id" not in model.attributes
    assert model.event_names == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]  # no compute


def test_a_propagated_context_is_the_parent_even_when_not_sampled(receiver: OtlpReceiver) -> None:
    export = export_to(receiver)
    unsampled = TRACEPARENT[:-2] + "00"
    context = export.extract({"traceparent": unsampled})
    assert context is not None
    assert export.extract({"traceparent": "00-zz"}) is None
    assert export.extract({}) is None
    trace = SpanRecord(export, TraceLevel.TIMESTAMPS, itertools.count(1), context).new_trace()
    trace.release()
    export.shutdown()
    (root,) = receiver.wait_for(1)
    assert (root.name, root.trace_id, root.parent_id) == (
        "InferRequest",
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )


def tracer(receiver: OtlpReceiver, rate: int, count: int = -1) -> TraceManager:
    config = (("url", receiver.url), ("bsp_schedule_delay", "20"))
    options = TraceOptions(TraceLevel.TIMESTAMPS, rate, count, mode="opentelemetry", config=config)
    return TraceManager(options)


def test_a_request_with_a_trace_context_is_traced_whatever_the_rate_and_count(
    receiver: OtlpReceiver,
) -> None:
    manager = tracer(receiver, rate=0)
    assert manager.propagates
    assert manager.sample("m") is None
    assert manager.sample("m", {"traceparent": "00-bad"}) is None
    forced = manager.sample("m", {"traceparent": TRACEPARENT})
    assert forced is not None
    forced.release()
    manager.close()
    assert [s.trace_id for s in receiver.wait_for(1)] == ["0af7651916cd43dd8448eb211c80319c"]


def test_rate_and_count_sample_as_in_the_triton_mode(receiver: OtlpReceiver) -> None:
    manager = tracer(receiver, rate=2, count=2)
    sampled = [manager.sample("m") for _ in range(6)]
    assert [t is not None for t in sampled] == [False, True, False, True, False, False]
    assert manager.setting().count == 0
    # a used-up count still lets a propagated context through (Triton's force_sample)
    assert manager.sample("m", {"traceparent": TRACEPARENT}) is not None
    manager.close()


def test_level_off_ignores_a_propagated_context(receiver: OtlpReceiver) -> None:
    options = TraceOptions(TraceLevel.OFF, 1, mode="opentelemetry", config=(("url", receiver.url),))
    manager = TraceManager(options)
    assert manager.sample("m", {"traceparent": TRACEPARENT}) is None
    manager.close()


def test_tensors_are_not_exported_and_logged_as_triton_logs_them(
    receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    import numpy as np

    from workbench._types import Tensor

    export = export_to(receiver)
    trace = SpanRecord(export, TraceLevel.TENSORS, itertools.count(1)).new_trace()
    tensor = Tensor("INPUT0", "FP32", np.zeros((1, 2), np.float32))
    trace.report_request("m", 1, "", RequestTimes(), inputs=[tensor])
    trace.release()
    export.shutdown()
    (root,) = receiver.wait_for(1)  # no timestamps at level TENSORS alone: the root span only
    assert root.events == []
    assert "Tensor level tracing is not supported by the mode: opentelemetry" in caplog.text


def test_the_sdk_is_needed_only_in_opentelemetry_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'triton-workbench\[trace\]'"):
        TraceManager(TraceOptions(mode="opentelemetry"))
    TraceManager(TraceOptions()).close()


def test_importing_workbench_does_not_import_opentelemetry() -> None:
    code = (
        "import sys, workbench, workbench.server.trace_config, workbench.core.trace_settings\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
