"""Draw an ``EnsembleGraph`` with plotly: layers left to right, arrows for tensors, problems
in red with their message on hover."""

from __future__ import annotations

import html
from typing import Any

from workbench.errors import MissingDependencyError
from workbench.notebook.dag import INPUT, MISSING, OUTPUT, STEP, DagEdge, DagNode, EnsembleGraph

RED = "#d62728"
GREY = "#8c8c8c"
COLORS = {INPUT: "#1f77b4", STEP: "#2ca02c", OUTPUT: "#9467bd", MISSING: RED}
SYMBOLS = {INPUT: "circle", STEP: "square", OUTPUT: "diamond", MISSING: "x"}


def _plotly() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise MissingDependencyError("plotly", "notebook") from None
    return go


def positions(graph: EnsembleGraph) -> dict[str, tuple[float, float]]:
    """x = layer, y spread evenly around 0 within a layer (first node on top)."""
    placed: dict[str, tuple[float, float]] = {}
    for layer in graph.layers():
        for rank, node in enumerate(layer):
            placed[node.id] = (float(node.layer), (len(layer) - 1) / 2 - rank)
    return placed


def _hover(title: str, details: list[str], problems: list[str]) -> str:
    lines = [f"<b>{html.escape(title)}</b>", *map(html.escape, details)]
    lines += [f"<span style='color:{RED}'>{html.escape(p)}</span>" for p in problems]
    return "<br>".join(lines)


def _node_trace(go: Any, graph: EnsembleGraph, placed: dict[str, tuple[float, float]]) -> Any:
    nodes: list[DagNode] = list(graph.nodes.values())
    return go.Scatter(
        x=[placed[n.id][0] for n in nodes],
        y=[placed[n.id][1] for n in nodes],
        mode="markers+text",
        name="nodes",
        text=[n.label for n in nodes],
        textposition="top center",
        hovertext=[_hover(f"{n.kind} {n.label}", n.details, n.problems) for n in nodes],
        hoverinfo="text",
        customdata=[n.id for n in nodes],
        marker={
            "size": 26,
            "symbol": [SYMBOLS[n.kind] for n in nodes],
            "color": [RED if n.problems else COLORS[n.kind] for n in nodes],
            "line": {"width": 2, "color": [RED if n.problems else "white" for n in nodes]},
        },
        showlegend=False,
    )


def _edge_label_trace(go: Any, edges: list[DagEdge], placed: dict[str, Any]) -> Any:
    middles = [
        (
            (placed[e.source][0] + placed[e.target][0]) / 2,
            (placed[e.source][1] + placed[e.target][1]) / 2,
        )
        for e in edges
    ]
    return go.Scatter(
        x=[m[0] for m in middles],
        y=[m[1] for m in middles],
        mode="markers+text",
        name="tensors",
        text=[e.label for e in edges],
        textposition="bottom center",
        textfont={"size": 10, "color": [RED if e.problems else "#444" for e in edges]},
        hovertext=[_hover(f"tensor {e.tensor}", [e.datatype, e.shape], e.problems) for e in edges],
        hoverinfo="text",
        customdata=[f"{e.source}->{e.target}" for e in edges],
        marker={"size": 8, "color": [RED if e.problems else GREY for e in edges]},
        showlegend=False,
    )


def _arrow(edge: DagEdge, placed: dict[str, tuple[float, float]]) -> dict[str, Any]:
    (x0, y0), (x1, y1) = placed[edge.source], placed[edge.target]
    return {
        "x": x1,
        "y": y1,
        "ax": x0,
        "ay": y0,
        "xref": "x",
        "yref": "y",
        "axref": "x",
        "ayref": "y",
        "showarrow": True,
        "arrowhead": 2,
        "arrowwidth": 2 if edge.problems else 1.2,
        "arrowcolor": RED if edge.problems else GREY,
        "standoff": 14,
        "startstandoff": 14,
        "text": "",
    }


def _title(graph: EnsembleGraph) -> str:
    problems = graph.all_problems()
    verdict = f"{len(problems)} problem(s)" if problems else "no problems found"
    return f"ensemble '{graph.name}' ({graph.state}): {verdict}"


def draw_graph(graph: EnsembleGraph) -> Any:
    """A plotly ``Figure`` of ``graph``."""
    go = _plotly()
    placed = positions(graph)
    figure = go.Figure([_edge_label_trace(go, graph.edges, placed), _node_trace(go, graph, placed)])
    annotations = [_arrow(edge, placed) for edge in graph.edges]
    for offset, message in enumerate(graph.problems):
        annotations.append(
            {
                "text": html.escape(message),
                "xref": "paper",
                "yref": "paper",
                "x": 0,
                "y": -0.08 - 0.06 * offset,
                "showarrow": False,
                "align": "left",
                "font": {"color": RED, "size": 11},
            }
        )
    depth = max(len(layer) for layer in graph.layers()) if graph.nodes else 1
    figure.update_layout(
        title=_title(graph),
        annotations=annotations,
        template="plotly_white",
        height=max(320, 130 * depth + 40 * len(graph.problems)),
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"b": 40 + 30 * len(graph.problems)},
        hoverlabel={"align": "left"},
    )
    return figure


__all__ = ["draw_graph", "positions"]
