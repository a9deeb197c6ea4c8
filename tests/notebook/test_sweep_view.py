"""The live sweep view, without a kernel: it grows, counts, stops and reports the end."""

from __future__ import annotations

import math

from tests.bench.test_result import BASE, ROWS
from workbench.bench import Progress, SweepResult
from workbench.notebook.sweep_view import SweepView, eta_text


def test_eta_text() -> None:
    assert eta_text(0, 12, math.nan) == "0/12 measurements"
    assert eta_text(3, 12, 19.6) == "3/12 measurements, ETA 20 s"


def test_progress_grows_the_curves_and_the_bar() -> None:
    view = SweepView(total=len(ROWS), title="sweep of 'm'")
    result = SweepResult("m", BASE, [], finished=False)
    view.attach(result)
    for done, row in enumerate(ROWS, start=1):
        view.update(Progress(done, len(ROWS), elapsed_s=done * 2.0, row=row))
    assert view.progress.value == 4 and view.progress.max == 4
    assert [len(trace.x) for trace in view.figure.data] == [2, 2]
    assert view.status.value == "4/4 measurements, ETA 0 s"
    assert view.figure.layout.title.text == "sweep of 'm'"


def test_stop_button_stops_the_sweep_and_the_end_shows() -> None:
    view = SweepView(total=4)
    result = SweepResult("m", BASE, [], finished=False)
    view.attach(result)
    view.stop_button.click()
    assert result.stop_event.is_set()
    assert view.status.value.startswith("stopping")
    result.rows.append(dict(ROWS[0]))
    result.finish()
    assert view.progress.bar_style == "warning"
    assert view.status.value == "stopped: 1 measurement kept"
    assert view.stop_button.disabled and view.stop_button.layout.display == "none"


def test_a_finished_sweep_hides_its_stop_button() -> None:
    view = SweepView(total=len(ROWS))
    result = SweepResult("m", BASE, [], finished=False)
    view.attach(result)
    assert view.stop_button.layout.display != "none"
    result.rows.extend(dict(row) for row in ROWS)
    result.finish()
    assert view.progress.bar_style == "success"
    assert view.status.value == f"done: {len(ROWS)} measurements"
    assert view.stop_button.disabled and view.stop_button.layout.display == "none"


def test_a_failed_sweep_says_why() -> None:
    view = SweepView(total=2)
    result = SweepResult("m", BASE, [], finished=False)
    view.attach(result)
    result.finish(RuntimeError("server went away"))
    assert view.progress.bar_style == "danger"
    assert view.status.value == "failed: server went away"
    assert view.stop_button.layout.display == "none"
