"""Custom metrics: the server's registry, pb_utils' checks, and a stub's batched forwarding."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import pytest

from workbench.backends.python import CUSTOM_METRICS, pb_utils
from workbench.backends.python._model_metrics import RegistrySink, install_sink
from workbench.backends.python._server_metrics import CustomMetricRegistry, MetricKind
from workbench.backends.python._stub_metrics import MetricForwarder


@pytest.fixture
def registry() -> Iterator[CustomMetricRegistry]:
    yield CUSTOM_METRICS
    install_sink(RegistrySink())


def _values(registry: CustomMetricRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    family = next(f for f in registry.families() if f.name == name)
    return {key: series.value for key, series in family.series.items()}


def test_in_process_metrics_reach_the_registry(registry: CustomMetricRegistry) -> None:
    family = pb_utils.MetricFamily("wb_test_in_process", "help text", pb_utils.MetricFamily.COUNTER)
    first = family.Metric(labels={"a": "1"})
    same = family.Metric(labels={"a": "1"})  # same labels: one series, as in Triton
    first.increment(2)
    same.increment(3)
    assert _values(registry, "wb_test_in_process") == {(("a", "1"),): 5.0}
    assert first.value() == 2  # this object's own view
    del first, same, family
    gc.collect()
    assert _values(registry, "wb_test_in_process") == {}
    assert any(f.name == "wb_test_in_process" for f in registry.families())


def test_pb_utils_refuses_what_triton_refuses(registry: CustomMetricRegistry) -> None:
    counter = pb_utils.MetricFamily("wb_test_checks", "c", pb_utils.MetricFamily.COUNTER)
    histogram = pb_utils.MetricFamily("wb_test_checks_h", "h", pb_utils.MetricFamily.HISTOGRAM)
    cases = [
        (
            lambda: counter.Metric(labels="x"),  # type: ignore[arg-type]
            "Labels must be a dictionary",
        ),
        (lambda: counter.Metric(buckets=[1.0]), "Unexpected buckets found"),
        (lambda: histogram.Metric(), "Missing required buckets"),
        (lambda: histogram.Metric(buckets=(1.0,)), "Buckets must be a list"),
        (lambda: counter.Metric().increment(-1), "can only be incremented monotonically"),
        (lambda: counter.Metric().set(1), "COUNTER does not support Set"),
        (lambda: counter.Metric().observe(1), "COUNTER does not support Observe"),
        (lambda: histogram.Metric(buckets=[1.0]).value(), "HISTOGRAM does not support Value"),
        (
            lambda: pb_utils.MetricFamily("wb_test_checks", "c", pb_utils.MetricFamily.GAUGE),
            "already exists as a counter",
        ),
    ]
    for call, message in cases:
        with pytest.raises(pb_utils.TritonModelException, match=message):
            call()


def test_forwarder_batches_and_the_registry_applies_in_order() -> None:
    registry = CustomMetricRegistry()
    forwarder = MetricForwarder()
    forwarder.new_family(1, "fwd_requests", "requests", int(MetricKind.COUNTER))
    forwarder.new_family(2, "fwd_latency", "latency", int(MetricKind.HISTOGRAM))
    forwarder.new_metric(3, 1, {"model": "m"}, None)
    forwarder.new_metric(4, 2, {"model": "m"}, [1.0, 10.0])
    for _ in range(100):
        forwarder.increment(3, 1.0)
    forwarder.observe(4, 0.5)
    forwarder.observe(4, 5.0)
    operations = forwarder.take()
    # 100 increments travel as one operation.
    assert [op[0] for op in operations] == [
        "family",
        "family",
        "metric",
        "metric",
        "increment",
        "observe",
    ]
    assert forwarder.take() == []
    owner = object()
    registry.apply(owner, operations)
    families = {f.name: f for f in registry.families()}
    [series] = families["fwd_requests"].series.values()
    assert series.value == 100
    [histogram] = families["fwd_latency"].series.values()
    assert (histogram.count, histogram.value, histogram.bucket_counts) == (2, 5.5, [1, 1])
    forwarder.drop_metric(3)
    registry.apply(owner, forwarder.take())
    assert registry.families()[0].series == {}
    registry.drop_owner(owner)  # the stub ended: what it created goes
    assert all(not f.series for f in registry.families())


def test_a_bad_forwarded_operation_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    registry = CustomMetricRegistry()
    registry.apply("owner", [("increment", 99, 1.0), ("family", 1, "ok_family", "ok", 1)])
    assert "custom metric operation" in caplog.text
    assert [f.name for f in registry.families()] == ["ok_family"]


def test_flusher_sends_updates_made_between_calls() -> None:
    forwarder = MetricForwarder()
    sent: list[list[tuple[object, ...]]] = []
    forwarder.start_flusher(sent.append)
    forwarder.new_family(1, "flushed", "f", int(MetricKind.GAUGE))
    forwarder.new_metric(2, 1, {}, None)
    forwarder.set(2, 4.0)
    for _ in range(200):  # bounded wait for the flusher thread (50 ms interval)
        if sent:
            break
        time.sleep(0.01)
    forwarder.stop()
    assert sent and sent[0][-1] == ("set", 2, 4.0)
