"""``Workbench.sweep``: headless it returns the finished result; live it returns at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from workbench.bench import SweepResult
from workbench.errors import InvalidArgumentError, NotFoundError
from workbench.notebook import Workbench
from workbench.notebook.sweep_session import in_kernel

pytestmark = [pytest.mark.integration]


def test_not_in_a_kernel_here() -> None:
    assert not in_kernel()


def test_headless_sweep_returns_the_finished_result(
    bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    result = bench.sweep(
        name, max_batch_size=[4, 8], concurrency=[1, 2], duration_s=0.2, warmup_s=0.05
    )
    assert isinstance(result, SweepResult) and not result.running
    assert len(result.df) == 4 and (result.df["error"] == "").all()
    best = result.best(objective="perf_latency_p99")
    assert best.settings["max_batch_size"] in (4, 8)
    result.apply_best(objective="perf_throughput")  # through bench.edit(), no argument needed
    assert bench.config(name).max_batch_size == result.best().settings["max_batch_size"]


def test_live_sweep_runs_in_the_background(
    bench: Workbench, new_model: Callable[[], str], capsys: pytest.CaptureFixture[str]
) -> None:
    name = new_model()
    result = bench.sweep(name, instance_count=[1, 2], concurrency=1, duration_s=0.3, live=True)
    assert "VBox" in capsys.readouterr().out  # displayed (as text, outside a kernel)
    result.wait(timeout_s=120)
    assert len(result.rows) == 2 and not result.running


def test_bad_requests_fail_in_the_callers_cell(bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown sweep setting"):
        from workbench.bench.runner import SweepSpec

        SweepSpec.plan("linear", bench.model_dir("linear"), settings={"batch": [1]})
    with pytest.raises(InvalidArgumentError, match="has no input"):
        bench.sweep("linear", concurrency=1, inputs={"NOPE": [1.0]})
    with pytest.raises(InvalidArgumentError, match="protocol must be"):
        bench.sweep("linear", concurrency=1, protocol="udp")
    with pytest.raises(NotFoundError):
        bench.sweep("no_such_model")


def test_a_sweep_with_trace_requests_reports_where_time_goes_at_each_point(
    bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    result = bench.sweep(
        name, max_batch_size=[4, 8], concurrency=1, duration_s=0.2, warmup_s=0.05, trace_requests=3
    )
    assert list(result.traces) == list(dict.fromkeys(result.df["config"]))
    report = result.trace(1)  # by index, or by its config label
    assert report.title.startswith(f"{name} (max_batch_size=8)")
    assert sorted(report.traces["request_id"]) == ["trace-0", "trace-1", "trace-2"]
    assert {"queue", "compute_infer"} <= set(report.spans["span"])
    assert len(result.trace("max_batch_size=4").traces) == 3
    with pytest.raises(InvalidArgumentError, match="point must be 0 to 1"):
        result.trace(2)
