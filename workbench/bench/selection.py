"""Choosing the best measured point, with Model Analyzer's objectives and constraints.

Objectives: ``perf_throughput`` (maximise inferences per second) and ``perf_latency_p99``
(minimise p99 latency); constraints: ``perf_latency_p99`` at most ``p99_ms`` and
``perf_throughput`` at least ``min_throughput``. Points with any failed request never win.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.errors import InvalidArgumentError, NotFoundError

Row = Mapping[str, Any]

#: accepted names for each objective: Model Analyzer's and the short ones
OBJECTIVES = {
    "perf_throughput": "throughput",
    "throughput": "throughput",
    "perf_latency_p99": "p99",
    "p99": "p99",
    "latency": "p99",
}


def _usable(row: Row) -> bool:
    throughput, p99 = row.get("throughput"), row.get("p99_ms")
    return (
        not row.get("errors")
        and not row.get("error")
        and isinstance(throughput, int | float)
        and isinstance(p99, int | float)
        and not math.isnan(p99)
        and throughput > 0
    )


def _meets(row: Row, p99_ms: float | None, min_throughput: float | None) -> bool:
    if p99_ms is not None and row["p99_ms"] > p99_ms:
        return False
    return min_throughput is None or row["throughput"] >= min_throughput


def _constraint_text(p99_ms: float | None, min_throughput: float | None) -> str:
    parts = []
    if p99_ms is not None:
        parts.append(f"p99 <= {p99_ms:g} ms")
    if min_throughput is not None:
        parts.append(f"throughput >= {min_throughput:g}/s")
    return " and ".join(parts)


def candidates(
    rows: Sequence[Row], *, p99_ms: float | None = None, min_throughput: float | None = None
) -> list[Row]:
    """The rows ``select_best`` chooses among: measured without errors, within the
    constraints."""
    return [row for row in rows if _usable(row) and _meets(row, p99_ms, min_throughput)]


def select_best(
    rows: Sequence[Row],
    *,
    objective: str = "perf_throughput",
    p99_ms: float | None = None,
    min_throughput: float | None = None,
) -> Row:
    """The row that best meets ``objective`` among those meeting the constraints.

    Ties go to the other objective (lower p99 for equal throughput and vice versa). Raises
    ``NotFoundError`` saying what was measured when no point qualifies.
    """
    goal = OBJECTIVES.get(objective)
    if goal is None:
        raise InvalidArgumentError(
            f"unknown objective {objective!r}; use 'perf_throughput' or 'perf_latency_p99'"
        )
    usable = [row for row in rows if _usable(row)]
    if not usable:
        raise NotFoundError("no measured point without errors; nothing to choose from")
    eligible = [row for row in usable if _meets(row, p99_ms, min_throughput)]
    if not eligible:
        fastest = min(usable, key=lambda row: row["p99_ms"])
        busiest = max(usable, key=lambda row: row["throughput"])
        raise NotFoundError(
            f"no measured point meets {_constraint_text(p99_ms, min_throughput)}: the lowest "
            f"p99 was {fastest['p99_ms']:.2f} ms ({fastest.get('config', '')}, concurrency "
            f"{fastest.get('concurrency')}), the highest throughput {busiest['throughput']:.1f}/s"
        )
    if goal == "throughput":
        return max(eligible, key=lambda row: (row["throughput"], -row["p99_ms"]))
    return min(eligible, key=lambda row: (row["p99_ms"], -row["throughput"]))


__all__ = ["OBJECTIVES", "candidates", "select_best"]
