"""The gain table of ``benchmarks/instance_gain.py``: medians per instance count, over the first."""

from __future__ import annotations

import math

import pytest

from benchmarks import instance_gain


def _sweep(throughputs: dict[int, float], busy: float = 0.5) -> list[dict[str, object]]:
    return [
        {"instance_count": count, "throughput": value, "host_cpu": busy}
        for count, value in throughputs.items()
    ]


def test_gains_are_medians_over_the_smallest_count() -> None:
    runs = [
        _sweep({2: 3000.0, 1: 1000.0}, busy=0.9),
        _sweep({1: 1200.0, 2: 2000.0}, busy=0.7),
        _sweep({1: 5000.0, 2: 2600.0}, busy=0.8),
    ]
    table = instance_gain.gains(runs)
    assert [entry["instance_count"] for entry in table] == [1, 2]
    assert table[0]["throughput"] == 1200.0  # the median of 1000, 1200 and 5000
    assert table[1]["throughput"] == 2600.0
    assert table[0]["gain"] == 1.0
    assert table[1]["gain"] == pytest.approx(2600 / 1200)
    assert table[1]["host_cpu"] == pytest.approx(0.8)


def test_a_remote_servers_missing_host_cpu_is_nan() -> None:
    rows = [{"instance_count": 1, "throughput": 10.0, "host_cpu": None}]
    [entry] = instance_gain.gains([rows])
    assert math.isnan(entry["host_cpu"])


def test_a_nan_host_cpu_is_left_out_of_the_median() -> None:
    runs = [_sweep({1: 10.0}, busy=0.6), _sweep({1: 10.0}, busy=math.nan), _sweep({1: 10.0})]
    [entry] = instance_gain.gains(runs)
    assert entry["host_cpu"] == pytest.approx(0.55)


def test_the_section_prints_each_count_and_its_gain() -> None:
    text = instance_gain.section("workbench", [_sweep({1: 1500.0, 2: 2250.0, 4: 3000.0})])
    assert "### workbench (1 sweep)" in text
    assert "| 2 | 2,250 | 1.50x | 0.50 |" in text
    assert "| 4 | 3,000 | 2.00x | 0.50 |" in text
