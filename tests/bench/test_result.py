"""SweepResult: table, figure, best config as a diff, apply through an editor, save/load."""

from __future__ import annotations

import _thread
import math
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workbench.bench import (
    PartialSweepWarning,
    SaturatedHostWarning,
    SweepInterrupted,
    SweepResult,
)
from workbench.config import parse_pbtxt
from workbench.errors import InvalidArgumentError, UnavailableError

BASE = parse_pbtxt(
    'name: "m" backend: "onnxruntime" max_batch_size: 8 '
    'input { name: "X" data_type: TYPE_FP32 dims: [4] } '
    'output { name: "Y" data_type: TYPE_FP32 dims: [3] } '
    "dynamic_batching { max_queue_delay_microseconds: 100 } "
    "instance_group { count: 1 kind: KIND_CPU }"
)


def row(mbs: int, count: int, concurrency: int, throughput: float, p99: float) -> dict:
    return {
        "config": f"max_batch_size={mbs}, instance_count={count}",
        "max_batch_size": mbs,
        "instance_count": count,
        "concurrency": concurrency,
        "throughput": throughput,
        "p50_ms": p99 / 2,
        "p90_ms": p99 * 0.8,
        "p95_ms": p99 * 0.9,
        "p99_ms": p99,
        "avg_ms": p99 / 2,
        "requests": int(throughput),
        "errors": 0,
        "queue_us": 10.0,
        "compute_input_us": 1.0,
        "compute_infer_us": 100.0,
        "compute_output_us": 1.0,
        "error": "",
    }


ROWS = [
    row(8, 1, 1, 300.0, 4.0),
    row(8, 1, 8, 900.0, 15.0),
    row(8, 2, 1, 320.0, 3.5),
    row(8, 2, 8, 1200.0, 25.0),
]


def result() -> SweepResult:
    return SweepResult("m", BASE, ["instance_count", "max_batch_size"], ROWS)


def test_df_has_one_row_per_point_and_the_issue_columns() -> None:
    df = result().df
    assert len(df) == 4
    assert list(df.columns[:4]) == ["config", "max_batch_size", "instance_count", "concurrency"]
    for column in (
        "throughput",
        "p50_ms",
        "p90_ms",
        "p95_ms",
        "p99_ms",
        "queue_us",
        "compute_input_us",
        "compute_infer_us",
        "compute_output_us",
        "errors",
    ):
        assert column in df.columns


def test_best_is_a_config_diff() -> None:
    best = result().best(p99_ms=20)
    assert dict(best.settings) == {"max_batch_size": 8, "instance_count": 1}
    assert best.concurrency == 8 and best.metrics["throughput"] == 900.0
    assert best.diff == ""  # the base config already has these settings
    best = result().best()
    assert dict(best.settings)["instance_count"] == 2
    assert "-  count: 1\n+  count: 2" in best.diff
    assert best.config.instance_group[0].count == 2
    assert "instance_count=2 at concurrency 8: 1200.0 infer/s, p99 25.00 ms" in str(best)


def test_figure_has_one_curve_per_config() -> None:
    figure = result().figure
    assert [trace.name for trace in figure.data] == [
        "max_batch_size=8, instance_count=1",
        "max_batch_size=8, instance_count=2",
    ]
    assert list(figure.data[1].x) == [320.0, 1200.0] and list(figure.data[1].y) == [3.5, 25.0]


def test_rows_without_latency_stay_off_the_figure() -> None:
    failed = dict(ROWS[0], p99_ms=math.nan, error="did not load", config="broken")
    figure = SweepResult("m", BASE, [], [failed]).figure
    assert len(figure.data) == 0


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    original = result()
    path = original.save(tmp_path / "sweep.json")
    loaded = SweepResult.load(path)
    assert loaded.rows == original.rows and loaded.axes == original.axes
    assert loaded.base_config == BASE
    assert loaded.best().diff == original.best().diff


def test_load_refuses_other_files(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"rows": []}')
    with pytest.raises(InvalidArgumentError, match="is not a saved sweep result"):
        SweepResult.load(path)


class FakeEditor:
    def __init__(self) -> None:
        self.config = parse_pbtxt(str(BASE).replace("max_batch_size: 8", "max_batch_size: 16"))
        self.applied: list[Any] = []

    def apply(self) -> None:
        self.applied.append(self.config)


class FakeBench:
    def __init__(self) -> None:
        self.editors: dict[str, FakeEditor] = {}

    def edit(self, name: str) -> FakeEditor:
        return self.editors.setdefault(name, FakeEditor())


def test_apply_best_goes_through_the_editor_onto_the_current_file() -> None:
    bench = FakeBench()
    best = result().apply_best(bench, p99_ms=20)
    editor = bench.editors["m"]
    assert len(editor.applied) == 1
    # the chosen settings, on top of what the editor read from disk
    assert editor.config.max_batch_size == 8 and editor.config.instance_group[0].count == 1
    assert best.concurrency == 8


def test_apply_best_needs_a_bench() -> None:
    with pytest.raises(InvalidArgumentError, match=r"result.apply_best\(bench\)"):
        result().apply_best()


def test_a_running_result_waits_and_reports_how_it_ended() -> None:
    running = SweepResult("m", BASE, [], finished=False)
    assert running.running and "running" in repr(running)
    with pytest.raises(UnavailableError, match="still running"):
        running.wait(timeout_s=0.01)
    ended: list[SweepResult] = []
    running.on_finish(ended.append)
    threading.Timer(0.05, running.finish, args=(RuntimeError("server went away"),)).start()
    with pytest.raises(RuntimeError, match="server went away"):
        running.wait(timeout_s=10)
    assert ended == [running] and not running.running
    running.stop()
    assert running.stop_event.is_set()


def _running(planned: int) -> SweepResult:
    axes = ["instance_count", "max_batch_size"]
    return SweepResult("m", BASE, axes, options={"measurements": planned}, finished=False)


def _runner(result: SweepResult, rows: list[dict], *, until_stopped: bool) -> threading.Thread:
    """A stand-in for the sweep thread: measures ``rows`` (one per 20 ms), then, if asked,
    keeps going until the result is stopped."""

    def main() -> None:
        for measured in rows:
            time.sleep(0.02)
            result.rows.append(measured)
        while until_stopped and not result.stop_event.wait(0.01):
            pass
        result.finish()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    return thread


def test_reading_a_running_sweep_waits_for_all_its_rows() -> None:
    """What "Run All" does: the next cell reads the result while the sweep still runs."""
    running = _running(planned=4)
    _runner(running, ROWS, until_stopped=False)
    frame = running.df  # waits; no partial warning (filterwarnings=error would raise it)
    assert len(frame) == 4 and frame.attrs["partial"] is False and not running.running
    assert running.best().settings == {"instance_count": 2, "max_batch_size": 8}


@pytest.fixture
def python_sigint_handler() -> Iterator[None]:
    """Python's own SIGINT handler, whatever this process inherited: a shell that starts a job
    in the background sets SIGINT to ignored for it, and then ``interrupt_main`` does nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_sigint_handler")
def test_an_interrupted_wait_stops_the_sweep_and_keeps_its_rows() -> None:
    running = _running(planned=4)
    runner = _runner(running, ROWS[:1], until_stopped=True)
    deadline = time.monotonic() + 30
    while len(running.rows) < 1:  # the first row is in; then Jupyter's stop button is pressed
        assert time.monotonic() < deadline
        time.sleep(0.01)
    threading.Timer(0.05, _thread.interrupt_main).start()
    with pytest.raises(SweepInterrupted, match=r"stopped by the interrupt; 1 of 4 measurements"):
        running.wait()
    runner.join(10)
    assert running.stop_event.is_set() and not running.running and running.partial
    with pytest.warns(PartialSweepWarning, match="partial result: .* was stopped; 1 of 4"):
        frame = running.df
    assert len(frame) == 1 and frame.attrs["partial"] is True
    assert "partial" in repr(running)


def test_a_sweep_ended_by_an_error_says_its_rows_are_partial() -> None:
    failed = _running(planned=4)
    failed.rows.extend(ROWS[:2])
    failed.finish(RuntimeError("server went away"))
    with pytest.warns(PartialSweepWarning, match=r"ended by an error \(server went away\)"):
        assert len(failed.df) == 2
    with pytest.raises(RuntimeError, match="server went away"):
        failed.best()


def test_a_partial_sweep_warns_at_the_callers_line_whichever_view_reads_it(
    tmp_path: Path,
) -> None:
    stopped = _running(planned=4)
    stopped.rows.extend(ROWS[:2])
    stopped.finish()
    lines = []
    with pytest.warns(PartialSweepWarning, match="was stopped; 2 of 4") as caught:
        lines.append(_line_after())
        stopped.df  # noqa: B018 (a property read for its warning)
        lines.append(_line_after())
        stopped.figure  # noqa: B018
        lines.append(_line_after())
        stopped.best()
        lines.append(_line_after())
        stopped.apply_best(FakeBench())
        lines.append(_line_after())
        stopped.save(tmp_path / "partial.json")
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line) for line in lines]


def _line_after() -> int:
    """The caller's next line (where the read under test is)."""
    frame = sys._getframe(1)
    return frame.f_lineno + 1


# -- the machine's CPU at each point ----------------------------------------------------------
def _with_host_cpu(shares: list[float]) -> SweepResult:
    rows = [dict(r, host_cpu=share) for r, share in zip(ROWS, shares, strict=True)]
    return SweepResult("m", BASE, ["instance_count", "max_batch_size"], rows)


def test_host_cpu_is_a_column_of_the_table() -> None:
    df = _with_host_cpu([0.3, 0.95, 0.4, 0.99]).df
    assert df["host_cpu"].tolist() == [0.3, 0.95, 0.4, 0.99]
    assert math.isnan(result().df["host_cpu"][0])  # rows measured before it was recorded


def test_choosing_an_instance_count_on_a_saturated_machine_warns_where_it_was_chosen() -> None:
    swept = _with_host_cpu([0.3, 0.95, 0.4, 0.99])
    with pytest.warns(SaturatedHostWarning) as caught:
        best = swept.best()
    assert best.settings["instance_count"] == 2 and best.metrics["host_cpu"] == 0.99
    (warning,) = caught
    text = str(warning.message)
    assert "80% busy or more at 2 of the 4 points chosen among" in text
    assert "max_batch_size=8, instance_count=1 at c=8; " in text and "count=2 on" in text
    assert warning.filename == __file__  # the caller's line, not the library's
    with pytest.warns(SaturatedHostWarning) as caught:
        swept.apply_best(FakeBench())
    assert caught[0].filename == __file__


def test_saturated_points_outside_the_constraints_do_not_count() -> None:
    # the two saturated points have p99 15 and 25 ms: under p99_ms=5 only the others compete
    swept = _with_host_cpu([0.3, 0.95, 0.4, 0.99])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturatedHostWarning)
        best = swept.best(p99_ms=5)
    assert best.settings["instance_count"] == 2 and best.concurrency == 1


def test_rows_with_an_instance_count_that_is_not_an_axis_are_chosen_among_quietly() -> None:
    rows = [dict(r, host_cpu=0.99) for r in ROWS]
    swept = SweepResult("m", BASE, ["max_batch_size"], rows)  # a result made by hand
    with pytest.warns(SaturatedHostWarning, match="instance_count=2"):
        best = swept.best()
    assert best.settings == {"max_batch_size": 8}


@pytest.mark.parametrize(
    "shares, instance_counts",
    [
        ([0.3, 0.79, 0.4, 0.5], (1, 2)),  # never saturated
        ([math.nan] * 4, (1, 2)),  # not measured (a remote server)
        ([0.95, 0.99, 0.95, 0.99], (2, 2)),  # saturated, but only one count was measured
    ],
)
def test_no_warning_where_the_count_was_not_chosen_on_a_saturated_machine(
    shares: list[float], instance_counts: tuple[int, int]
) -> None:
    rows = [
        dict(r, host_cpu=share, instance_count=instance_counts[i // 2])
        for i, (r, share) in enumerate(zip(ROWS, shares, strict=True))
    ]
    swept = SweepResult("m", BASE, ["instance_count", "max_batch_size"], rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SaturatedHostWarning)
        swept.best()
