"""The statistics ``benchmarks/transfer.py`` judges issue #17's transfer targets by."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from benchmarks import transfer


def _runs(values_per_point: list[list[float]]) -> list[list[dict[str, Any]]]:
    """Rows of ``len(values_per_point[0])`` sweeps; point i is concurrency i of the grid."""
    sweeps = len(values_per_point[0])
    return [
        [
            {"concurrency": point, "throughput": values[sweep]}
            for point, values in enumerate(values_per_point)
        ]
        for sweep in range(sweeps)
    ]


def test_ranks_share_exact_ties() -> None:
    assert transfer.ranks([30.0, 10.0, 20.0, 10.0]) == [3.0, 0.5, 2.0, 0.5]


def test_tie_ranks_without_noise_are_plain_ranks() -> None:
    values = [5.0, 1.0, 3.0, 2.0]
    assert transfer.tie_ranks(values, [0.0] * 4) == transfer.ranks(values)


def test_tie_ranks_group_what_the_noise_cannot_tell_apart() -> None:
    # 100 and 103 are within two standard errors (2 * sqrt(2) * 2 = 5.7); 110 is not
    assert transfer.tie_ranks([103.0, 100.0, 110.0], [2.0, 2.0, 2.0]) == [0.5, 0.5, 2.0]


def test_tie_ranks_measure_from_the_group_s_lowest_point() -> None:
    # each step is within the noise of the one before, but 108 is not within 100's
    ranks = transfer.tie_ranks([100.0, 104.0, 108.0], [1.5, 1.5, 1.5])
    assert ranks == [0.5, 0.5, 2.0]


def test_median_error_from_the_median_absolute_deviation() -> None:
    median, error = transfer.median_error([10.0, 12.0, 11.0, 30.0, 9.0])
    assert median == 11.0
    # deviations 1, 1, 0, 19, 2: MAD 1; the odd run's 30 does not widen it
    assert error == pytest.approx(1.2533 * 1.4826 * 1.0 / math.sqrt(5))
    assert math.isnan(transfer.median_error([1.0, 2.0])[1])


def test_near_ties_forgive_the_order_of_points_that_are_the_same() -> None:
    # points 0-2 are one behaviour (~100) measured with noise, 3 and 4 clearly faster; the
    # engines' medians order points 0-2 oppositely, which plain ρ counts against them
    ours = _runs([[99, 101, 103, 98, 102], [97, 100, 99, 101, 98], [101, 104, 100, 99, 103],
                  [200, 202, 198, 201, 199], [300, 305, 298, 301, 299]])  # fmt: skip
    theirs = _runs([[104, 100, 98, 106, 102], [99, 103, 97, 101, 105], [95, 99, 101, 97, 103],
                    [210, 208, 212, 209, 211], [320, 318, 322, 321, 319]])  # fmt: skip
    plain = transfer.spearman(
        [float(r["throughput"]) for r in transfer.median_rows(ours)],
        [float(r["throughput"]) for r in transfer.median_rows(theirs)],
    )
    assert plain < 0.95
    assert transfer.near_tie_rho(ours, theirs) == pytest.approx(1.0)


def test_near_ties_still_count_an_order_the_noise_does_tell() -> None:
    # two clearly different points swapped between the engines
    ours = _runs([[100, 101, 99], [200, 201, 199], [300, 301, 299]])
    theirs = _runs([[200, 201, 199], [100, 101, 99], [300, 301, 299]])
    assert transfer.near_tie_rho(ours, theirs) == pytest.approx(0.5)


def test_near_ties_need_three_runs_to_know_the_noise() -> None:
    ours = _runs([[100, 101], [200, 201]])
    assert math.isnan(transfer.near_tie_rho(ours, ours))


def test_two_arms_take_turns_as_before() -> None:
    orders = [transfer.turns(("a", "b"), repeat) for repeat in range(4)]
    assert orders == [["a", "b"], ["b", "a"], ["b", "a"], ["a", "b"]]


def test_three_arms_run_in_every_order_over_six_repeats() -> None:
    orders = [tuple(transfer.turns(("a", "b", "c"), repeat)) for repeat in range(6)]
    assert len(set(orders)) == 6
    for arm in "abc":  # each arm is first, second and third twice
        assert sorted(order.index(arm) for order in orders) == [0, 0, 1, 1, 2, 2]


def _sweeps(values_per_point: list[list[float]]) -> list[list[dict[str, Any]]]:
    """Like ``_runs``, over the grid's first points, with the columns a report reads."""
    points = itertools.product(*transfer.GRID.values())
    keys = [dict(zip(transfer.GRID, values, strict=True)) for values in points]
    sweeps = len(values_per_point[0])
    return [
        [
            {**keys[point], "throughput": values[sweep], "p99_ms": 1.0, "config": str(point)}
            for point, values in enumerate(values_per_point)
        ]
        for sweep in range(sweeps)
    ]


def test_the_control_line_judges_triton_s_second_set_as_ours_is() -> None:
    triton = _sweeps([[100, 101, 99], [200, 201, 199], [300, 301, 299]])
    swapped = _sweeps([[200, 201, 199], [100, 101, 99], [300, 301, 299]])
    runs = {"workbench": triton, "tritonserver": triton, transfer.CONTROL: swapped}
    report = transfer._section("m", runs, p99_ms=50)
    control = [line for line in report.splitlines() if line.startswith("Control")]
    # the second set swaps the two slower points: ρ 0.5 plain and with near-ties; it picks
    # the fastest point, as Triton does, so it loses nothing
    assert control == [
        "Control, Triton's medians against a second set of 3 Triton sweeps taken in turns: "
        "ρ = 0.500; with near-ties = 0.500; the point the second set picks loses 0.0% on "
        "Triton's medians"
    ]
    assert "ρ (Spearman, throughput) = 1.000" in report


def test_no_control_line_without_a_control() -> None:
    triton = _sweeps([[100, 101, 99], [200, 201, 199]])
    report = transfer._section("m", {"workbench": triton, "tritonserver": triton}, p99_ms=50)
    assert "Control" not in report
