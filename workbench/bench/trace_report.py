"""A per-request timeline of Triton traces (plotly) and the summary of where the time goes.

One row per trace, top to bottom in the order the requests came, an ensemble's steps under
it (indented, ``└``): a thin grey bar for the whole request (REQUEST_START to REQUEST_END),
with the queue (including batch formation), compute input, infer and output, and the HTTP
receive and send drawn over it in their colours. Times are microseconds from the first
timestamp of the recording, so requests that overlapped show it. The data come from
``workbench.bench.trace``; this module only draws (plotly is imported when a figure is asked
for), so the same view shows a trace file recorded on real Triton. ``Workbench.trace`` and a
sweep's ``SweepResult.trace`` both answer with a ``TraceReport``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.bench import tables
from workbench.bench.trace import span_rows, summary_rows, trace_rows
from workbench.errors import MissingDependencyError

#: span -> (legend label, colour); drawn in this order, the request first (underneath)
PHASES = {
    "request": ("request", "#d0d0d0"),
    "receive": ("HTTP receive", "#9ecae1"),
    "queue": ("queue (batch formation)", "#fdae6b"),
    "compute_input": ("compute input", "#74c476"),
    "compute_infer": ("compute infer", "#31a354"),
    "compute_output": ("compute output", "#a1d99b"),
    "send": ("HTTP send", "#6baed6"),
    "grpc_send": ("gRPC send", "#6baed6"),
}
SUMMARY_COLUMNS = (
    "model_name", "model_version", "traces", "request_us", "queue_us", "compute_input_us",
    "compute_infer_us", "compute_output_us", "overhead_us", "queue_share",
    "compute_infer_share", "overhead_share",
)  # fmt: skip
_BAR_WIDTH = {"request": 0.3}
_DEFAULT_WIDTH = 0.7


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise MissingDependencyError("plotly", "notebook") from None
    return go


def row_labels(rows: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """Trace id -> its row's label; a spawned trace comes right after its parent."""
    labels: dict[int, str] = {}
    children: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        children.setdefault(int(row.get("parent_id") or 0), []).append(row)

    def add(row: Mapping[str, Any], depth: int) -> None:
        request = f" ({row['request_id']})" if row.get("request_id") else ""
        prefix = "\u00a0\u00a0" * (depth - 1) + "\u2514 " if depth else ""
        labels[row["id"]] = f"{prefix}{row.get('model_name', '?')} #{row['id']}{request}"
        for child in children.get(row["id"], []):
            add(child, depth + 1)

    known = {row["id"] for row in rows}
    for row in rows:
        if int(row.get("parent_id") or 0) not in known:
            add(row, 0)
    return labels


def timeline_figure(entries: Sequence[Mapping[str, Any]], title: str = "") -> Any:
    """The timeline of the traces in ``entries`` (a trace file's entries) as a ``go.Figure``."""
    go = _plotly()
    rows = trace_rows(entries)
    labels = row_labels(rows)
    order = list(labels.values())
    spans = span_rows(rows)
    figure = go.Figure()
    for span, (name, colour) in PHASES.items():
        chosen = [s for s in spans if s["span"] == span and s["id"] in labels]
        if not chosen:
            continue
        figure.add_trace(
            go.Bar(
                name=name,
                orientation="h",
                y=[labels[s["id"]] for s in chosen],
                x=[s["duration_us"] for s in chosen],
                base=[s["start_us"] for s in chosen],
                width=_BAR_WIDTH.get(span, _DEFAULT_WIDTH),
                marker_color=colour,
                hovertemplate=f"{name}: %{{x:.1f}} µs (from %{{base:.1f}})<extra>%{{y}}</extra>",
            )
        )
    figure.update_layout(
        title=title or f"{len(order)} traces: where each request spends its time",
        barmode="overlay",
        xaxis_title="µs since the first timestamp",
        yaxis={"categoryorder": "array", "categoryarray": order, "autorange": "reversed"},
        height=max(300, 40 + 22 * len(order)),
        legend={"orientation": "h", "y": -0.15},
    )
    return figure


@dataclass
class TraceReport:
    """A traced run (``Workbench.trace``) or trace files read back: the traces and spans as
    DataFrames, the summary, and the timeline (``figure``)."""

    entries: list[dict[str, Any]]
    files: list[Path] = field(default_factory=list)
    title: str = ""

    @classmethod
    def from_files(cls, paths: Any, title: str = "") -> TraceReport:
        """A report of trace files recorded anywhere, e.g. on real tritonserver."""
        from workbench.bench.trace import read_traces, trace_files

        files = trace_files(paths) if isinstance(paths, str | Path) else [Path(p) for p in paths]
        return cls(read_traces(files or [Path(str(paths))]), files, title)

    @property
    def traces(self) -> Any:
        """One row per trace (``workbench.bench.trace.traces_frame``)."""
        from workbench.bench.trace import traces_frame

        return traces_frame(self.entries)

    @property
    def spans(self) -> Any:
        from workbench.bench.trace import spans_frame

        return spans_frame(self.entries)

    def summary_rows(self) -> list[dict[str, Any]]:
        return summary_rows(trace_rows(self.entries))

    @property
    def summary(self) -> Any:
        """Per model: average µs per request in each part and each part's share."""
        return tables.to_frame(self.summary_rows(), SUMMARY_COLUMNS)

    @property
    def figure(self) -> Any:
        return timeline_figure(self.entries, self.title)

    def __repr__(self) -> str:
        return f"TraceReport({len(trace_rows(self.entries))} traces)\n" + tables.text_table(
            self.summary_rows(), SUMMARY_COLUMNS
        )

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        display(self.figure)
        display(HTML(tables.html_table(self.summary_rows(), SUMMARY_COLUMNS)))


__all__ = [
    "PHASES",
    "SUMMARY_COLUMNS",
    "TraceReport",
    "row_labels",
    "timeline_figure",
]
