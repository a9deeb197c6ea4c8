"""The trace timeline and summary, headless (plotly Figure objects), and ``Workbench.trace``."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.bench.trace import read_trace_file
from workbench.notebook import Workbench
from workbench.notebook.trace_view import PHASES, TraceReport, row_labels, timeline_figure

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


@pytest.mark.integration
def test_workbench_trace_traces_the_requests_and_restores_the_setting(bench: Workbench) -> None:
    report = bench.trace("add", requests=3)
    rows = report.traces
    assert sorted(rows["request_id"]) == ["trace-0", "trace-1", "trace-2"]
    assert set(rows["model_name"]) == {"add"}
    assert {"queue", "compute_infer"} <= set(report.spans["span"])
    assert len(report.figure.data) >= 3
    setting = bench.client().get_trace_settings(model_name="add")
    assert setting["trace_level"] == ["OFF"]  # the model follows the global setting again
    again = bench.trace("add", requests=2)  # a second recording reads only its own file
    assert sorted(again.traces["request_id"]) == ["trace-0", "trace-1"]


@pytest.mark.integration
@pytest.mark.slow
def test_workbench_trace_runs_on_real_triton_too(tmp_path: Path) -> None:
    from tests.integration.peers import PeersUnavailable, copy_repository, prepare

    try:
        tritonserver = prepare().tritonserver
    except PeersUnavailable as error:
        pytest.skip(f"real tritonserver unavailable: {str(error).splitlines()[-1]}")
    source = Path(__file__).parents[1] / "assets" / "conformance_repo" / "add_one"
    repository = copy_repository(source, tmp_path / "repo" / "add_one").parent
    triton = Workbench(repository, engine="tritonserver", tritonserver=tritonserver)
    try:
        report = triton.trace("add_one", requests=2)
    finally:
        triton.stop()
    assert sorted(report.traces["request_id"]) == ["trace-0", "trace-1"]
    assert set(report.traces["protocol"]) == {"HTTP"}
    assert {"queue", "compute_infer", "receive", "send"} <= set(report.spans["span"])
