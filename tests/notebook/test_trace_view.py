"""``Workbench.trace``: record traces through Triton's trace API and report them, on the
embedded server and on real tritonserver (the report itself is tested in
``tests/bench/test_trace_report.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.notebook import Workbench


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
