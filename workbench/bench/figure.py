"""Latency-vs-throughput curves of a sweep: one curve per configuration, one marker per
concurrency level (plotly, imported only here and only when a figure is asked for)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.errors import MissingDependencyError

Row = Mapping[str, Any]

TITLE = "p99 latency vs throughput (one curve per configuration)"


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise MissingDependencyError("plotly", "notebook") from None
    return go


def _measured(row: Row) -> bool:
    p99 = row.get("p99_ms")
    return isinstance(p99, int | float) and not math.isnan(p99)


def _hover(row: Row) -> str:
    return (
        f"{row.get('config', '')}<br>concurrency {row.get('concurrency')}<br>"
        f"{row.get('throughput', 0):.1f} infer/s<br>p50 {row.get('p50_ms', 0):.2f} ms, "
        f"p99 {row.get('p99_ms', 0):.2f} ms"
    )


def latency_figure(rows: Sequence[Row] = (), *, widget: bool = False) -> Any:
    """A ``go.Figure`` (or a ``go.FigureWidget`` that can grow with ``add_point``)."""
    go = _plotly()
    figure = go.FigureWidget() if widget else go.Figure()
    figure.update_layout(
        title=TITLE,
        xaxis_title="throughput (infer/s)",
        yaxis_title="p99 latency (ms)",
        legend_title="configuration",
        template="plotly_white",
    )
    for row in rows:
        add_point(figure, row)
    return figure


def add_point(figure: Any, row: Row) -> None:
    """Append one measured point to its configuration's curve (a new curve for a new config);
    rows without a latency (every request failed) are skipped."""
    if not _measured(row):
        return
    name = str(row.get("config", ""))
    trace = next((t for t in figure.data if t.name == name), None)
    if trace is None:
        figure.add_scatter(x=[], y=[], name=name, mode="lines+markers", hovertext=[])
        trace = figure.data[-1]
        trace.hoverinfo = "text"
    with figure.batch_update():
        trace.x = (*(trace.x or ()), row["throughput"])
        trace.y = (*(trace.y or ()), row["p99_ms"])
        trace.hovertext = (*(trace.hovertext or ()), _hover(row))


__all__ = ["TITLE", "add_point", "latency_figure"]
