"""Trace files read into rows, spans and a summary: real Triton's files and partial ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas
import pytest

from workbench.bench.trace import (
    read_trace_file,
    read_traces,
    span_rows,
    spans_frame,
    summarize,
    summary_rows,
    trace_files,
    trace_rows,
    traces_frame,
)
from workbench.errors import InvalidArgumentError

TRITON_FILE = Path(__file__).parents[1] / "assets" / "traces" / "tritonserver_2_51.json"


def stamp(trace_id: int, name: str, ns: int) -> dict[str, Any]:
    return {"id": trace_id, "timestamps": [{"name": name, "ns": ns}]}


def request(trace_id: int, start: int, queue_us: int, compute_us: tuple[int, int, int],
            parent: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    """A model request's entries: REQUEST_START at ``start`` ns, then the given microseconds."""
    header: dict[str, Any] = {"id": trace_id, "model_name": "m", "model_version": 1}
    if parent:
        header["parent_id"] = parent
    at = start + 1000 * queue_us
    stamps = [("REQUEST_START", start), ("QUEUE_START", start), ("COMPUTE_START", at)]
    for name, micro in zip(("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"),
                           compute_us, strict=True):  # fmt: skip
        at += 1000 * micro
        stamps.append((name, at))
    stamps.append(("REQUEST_END", at + 1000))
    return [header, *(stamp(trace_id, name, ns) for name, ns in stamps)]


def test_tritons_own_file_reads_as_one_row_per_trace() -> None:
    rows = trace_rows(read_trace_file(TRITON_FILE))
    by_model = {(row["model_name"], row["protocol"]) for row in rows}
    assert ("add_one", "HTTP") in by_model and ("add_one", "GRPC") in by_model
    assert ("ens_diamond", "HTTP") in by_model
    ensemble = next(row for row in rows if row["model_name"] == "ens_diamond")
    steps = [row for row in rows if row["parent_id"] == ensemble["id"]]
    assert sorted(row["model_name"] for row in steps) == [
        "vec_add_one", "vec_sum_pair", "vec_times_two",
    ]  # fmt: skip


def test_tritons_own_file_as_frames() -> None:
    entries = read_trace_file(TRITON_FILE)
    traces = traces_frame(entries)
    assert list(traces.columns[:6]) == [
        "id", "parent_id", "model_name", "model_version", "request_id", "protocol",
    ]  # fmt: skip
    assert traces["REQUEST_START"].notna().all()
    spans = spans_frame(entries)
    assert (spans["duration_us"] >= 0).all()
    ensemble_id = int(traces.loc[traces["model_name"] == "ens_diamond", "id"].iloc[0])
    steps = spans[spans["parent_id"] == ensemble_id]
    assert set(steps["root_id"]) == {ensemble_id}
    summary = summarize(entries).set_index("model_name")
    assert summary.loc["add_one", "traces"] == 2
    assert pandas.isna(summary.loc["ens_diamond", "compute_infer_us"])  # no compute of its own
    assert summary.loc["ens_diamond", "request_us"] > 0


def test_summary_says_where_the_time_goes() -> None:
    entries = request(1, 0, 100, (10, 200, 20)) + request(2, 10**6, 300, (30, 400, 40))
    (summary,) = summary_rows(trace_rows(entries))
    assert summary["traces"] == 2
    assert (summary["queue_us"], summary["compute_infer_us"]) == (200.0, 300.0)
    assert summary["request_us"] == 200 + 20 + 300 + 30 + 1
    assert summary["overhead_us"] == 1.0
    assert summary["compute_infer_share"] == round(300 / 551, 3)


def test_spans_start_at_the_first_timestamp_and_know_their_front_end_request() -> None:
    entries = request(5, 2000, 1, (1, 1, 1)) + request(6, 3000, 1, (1, 1, 1), parent=5)
    spans = span_rows(trace_rows(entries))
    first = next(s for s in spans if s["id"] == 5 and s["span"] == "request")
    assert first["start_us"] == 0.0
    assert {s["root_id"] for s in spans} == {5}


def test_a_file_still_being_written_is_read_as_far_as_it_is_complete(tmp_path: Path) -> None:
    entries = request(1, 0, 1, (1, 1, 1)) + request(2, 5000, 1, (1, 1, 1))
    text = json.dumps(entries)
    unclosed = tmp_path / "unclosed.json"
    unclosed.write_text(text[:-1])  # Triton's main file before the server stops
    assert read_trace_file(unclosed) == entries
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.index('"id": 2') + 3])  # flushed mid-entry
    assert read_trace_file(cut) == [e for e in entries if e["id"] == 1]


def test_indexed_files_are_listed_in_index_order(tmp_path: Path) -> None:
    base = tmp_path / "trace.json"
    for name in ("trace.json.10", "trace.json.2", "trace.json", "trace.json.3.partial"):
        (tmp_path / name).write_text("[]")
    (tmp_path / "trace.json.2").write_text(json.dumps(request(7, 0, 1, (1, 1, 1))))
    assert [p.name for p in trace_files(base)] == ["trace.json", "trace.json.2", "trace.json.10"]
    assert [row["id"] for row in trace_rows(read_traces(base))] == [7]


def test_something_else_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"not": "a trace"}')
    with pytest.raises(InvalidArgumentError, match="not a Triton trace file"):
        read_trace_file(path)
