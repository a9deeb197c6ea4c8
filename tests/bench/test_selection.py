"""Best-point selection with Model Analyzer's objectives and constraints."""

from __future__ import annotations

import math

import pytest

from workbench.bench.selection import select_best
from workbench.errors import InvalidArgumentError, NotFoundError


def row(config: str, throughput: float, p99: float, errors: int = 0, error: str = "") -> dict:
    return {
        "config": config,
        "concurrency": 4,
        "throughput": throughput,
        "p99_ms": p99,
        "errors": errors,
        "error": error,
    }


ROWS = [
    row("a", 100.0, 5.0),
    row("b", 400.0, 30.0),
    row("c", 250.0, 12.0),
    row("d", 900.0, 2.0, errors=3, error="boom"),  # fastest and busiest, but failed requests
    row("e", 0.0, math.nan, error="did not load"),
]


def test_max_throughput_is_the_default_objective() -> None:
    assert select_best(ROWS)["config"] == "b"


def test_p99_constraint() -> None:
    assert select_best(ROWS, p99_ms=20)["config"] == "c"
    assert select_best(ROWS, p99_ms=12)["config"] == "c"  # the bound is inclusive


def test_min_p99_objective_with_min_throughput() -> None:
    assert select_best(ROWS, objective="perf_latency_p99")["config"] == "a"
    assert select_best(ROWS, objective="p99", min_throughput=200)["config"] == "c"


def test_ties_go_to_the_other_objective() -> None:
    tied = [row("slow", 100.0, 9.0), row("fast", 100.0, 3.0)]
    assert select_best(tied)["config"] == "fast"
    tied = [row("few", 50.0, 3.0), row("many", 80.0, 3.0)]
    assert select_best(tied, objective="perf_latency_p99")["config"] == "many"


def test_nothing_meets_the_constraints() -> None:
    with pytest.raises(NotFoundError) as raised:
        select_best(ROWS, p99_ms=1)
    message = str(raised.value)
    assert "no measured point meets p99 <= 1 ms" in message
    assert "lowest p99 was 5.00 ms (a, concurrency 4)" in message
    assert "highest throughput 400.0/s" in message


def test_only_failed_points() -> None:
    with pytest.raises(NotFoundError, match="no measured point without errors"):
        select_best(ROWS[3:])


def test_unknown_objective() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown objective 'speed'"):
        select_best(ROWS, objective="speed")
