"""The trace timeline and summary, headless (plotly Figure objects); ``Workbench.trace`` is
tested in ``tests/notebook/test_trace_view.py``."""

from __future__ import annotations

from pathlib import Path

from workbench.bench.trace import read_trace_file
from workbench.bench.trace_report import PHASES, TraceReport, row_labels, timeline_figure

TRITON_FILE = Path(__file__).parents[1] / "assets" / "traces" / "tritonserver_2_51.json"


def test_a_file_real_triton_wrote_draws_one_row_per_trace_steps_under_their_ensemble() -> None:
    entries = read_trace_file(TRITON_FILE)
    figure = timeline_figure(entries)
    order = list(figure.layout.yaxis.categoryarray)
    assert len(order) == 6  # two add_one requests, the ensemble and its three steps
    ensemble = next(i for i, label in enumerate(order) if label.startswith("ens_diamond"))
    assert all(label.startswith("\u2514 vec_") for label in order[ensemble + 1 : ensemble + 4])
    names = [bar.name for bar in figure.data]
    assert names[0] == "request"  # drawn first, underneath the phases
    assert {"queue (batch formation)", "compute infer", "HTTP receive", "gRPC send"} <= set(names)
    assert all(bar.orientation == "h" for bar in figure.data)


def test_phase_bars_sit_on_their_request_in_time() -> None:
    figure = timeline_figure(read_trace_file(TRITON_FILE))
    bars = {bar.name: bar for bar in figure.data}
    request = dict(zip(bars["request"].y, bars["request"].base, strict=True))
    for label, base in zip(bars["compute infer"].y, bars["compute infer"].base, strict=True):
        assert base >= request[label]


def test_labels_name_model_trace_id_and_request_id() -> None:
    rows = [
        {"id": 1, "parent_id": 0, "model_name": "ens", "request_id": "r"},
        {"id": 2, "parent_id": 1, "model_name": "step"},
    ]
    assert row_labels(rows) == {1: "ens #1 (r)", 2: "\u2514 step #2"}


def test_report_of_trace_files_has_frames_summary_and_text() -> None:
    report = TraceReport.from_files(TRITON_FILE)
    assert len(report.traces) == 6
    summary = report.summary.set_index("model_name")
    assert summary.loc["add_one", "traces"] == 2
    assert "TraceReport(6 traces)" in repr(report)
    assert set(report.spans["span"]) <= set(PHASES)
