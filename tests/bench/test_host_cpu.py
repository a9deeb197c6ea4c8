"""``host_cpu``: the share of this machine's CPU time that was busy between two readings."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from workbench.bench.host_cpu import CpuTimes, busy_fraction

#: /proc/stat's first line: user nice system idle iowait irq softirq steal guest guest_nice
LINE = "cpu  100 5 45 800 20 3 2 25 40 0"


def test_busy_is_all_but_idle_and_io_wait_with_steal_and_without_guest() -> None:
    times = CpuTimes.parse(LINE)
    assert times == CpuTimes(busy=100 + 5 + 45 + 3 + 2 + 25, total=1000)


def test_the_busy_share_between_two_readings() -> None:
    before = CpuTimes(busy=180, total=1000)
    assert busy_fraction(before, CpuTimes(busy=180 + 150, total=1200)) == pytest.approx(0.75)
    assert busy_fraction(before, CpuTimes(busy=180, total=1400)) == 0.0


@pytest.mark.parametrize(
    "before, after",
    [
        (None, CpuTimes(1, 2)),
        (CpuTimes(1, 2), None),
        (CpuTimes(1, 2), CpuTimes(1, 2)),  # no time passed
    ],
)
def test_no_share_without_two_readings_apart(
    before: CpuTimes | None, after: CpuTimes | None
) -> None:
    assert math.isnan(busy_fraction(before, after))


@pytest.mark.parametrize("line", ["", "cpu0 1 2 3 4 5", "intr 1 2 3 4 5", "cpu 1 2"])
def test_a_line_that_is_not_the_cpu_total_reads_as_none(line: str) -> None:
    assert CpuTimes.parse(line) is None


def test_where_there_is_no_proc_stat_the_reading_is_none(tmp_path: Path) -> None:
    assert CpuTimes.read(tmp_path / "missing") is None
    garbled = tmp_path / "stat"
    garbled.write_text("cpu  1 2 x 4 5\n")
    assert CpuTimes.read(garbled) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux's")
def test_this_machine_s_reading_moves_on() -> None:
    first = CpuTimes.read()
    assert first is not None and 0 <= first.busy <= first.total
    sum(i * i for i in range(300_000))  # some CPU time, so that the clock ticks on
    second = CpuTimes.read()
    assert second is not None and second.total >= first.total
