"""``Workbench.compare``: the same load on two workbenches (e.g. the embedded server and real
Triton, ``engine="tritonserver"``), drawn on one latency-vs-throughput figure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.bench import SweepResult
from workbench.bench.figure import latency_figure
from workbench.errors import MissingDependencyError

if TYPE_CHECKING:
    from workbench.notebook.workbench import Workbench


@dataclass
class EngineComparison:
    """One sweep per engine (by label) of the same model with the same load."""

    model: str
    results: Mapping[str, SweepResult]

    def rows(self) -> list[dict[str, Any]]:
        """Every measured row, its ``config`` column naming the engine (and configuration)."""
        merged = []
        for label, result in self.results.items():
            for row in result.rows:
                config = str(row.get("config") or "")
                tagged = f"{label}: {config}" if config and config != "as is" else label
                merged.append({**row, "config": tagged, "engine": label})
        return merged

    @property
    def df(self) -> Any:
        try:
            import pandas
        except ImportError:
            raise MissingDependencyError("pandas", "notebook") from None
        return pandas.DataFrame(self.rows())

    @property
    def figure(self) -> Any:
        """p99 latency vs throughput, one curve per engine (a plotly ``Figure``)."""
        figure = latency_figure(self.rows())
        figure.update_layout(title=f"'{self.model}': engines compared", legend_title="engine")
        return figure

    def _repr_html_(self) -> str:
        return str(self.figure.to_html(include_plotlyjs="cdn", full_html=False))


def engine_label(bench: Workbench, taken: set[str]) -> str:
    label = str(getattr(bench, "engine", "workbench"))
    suffix = 2
    unique = label
    while unique in taken:
        unique, suffix = f"{label} #{suffix}", suffix + 1
    taken.add(unique)
    return unique


def compare_engines(benches: list[Workbench], name: str, **sweep_options: Any) -> EngineComparison:
    """Sweep ``name`` on every bench in turn (never at once: they share the CPUs)."""
    taken: set[str] = set()
    results: dict[str, SweepResult] = {}
    for bench in benches:
        label = engine_label(bench, taken)
        results[label] = bench.sweep(name, live=False, **sweep_options)
    return EngineComparison(name, results)


__all__ = ["EngineComparison", "compare_engines"]
