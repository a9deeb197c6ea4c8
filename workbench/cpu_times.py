"""This machine's CPU time so far, from the aggregate ``cpu`` line of ``/proc/stat`` (Linux).

Read by the server's ``nv_cpu_utilization`` gauge (busy jiffies over all jiffies between two
samples, as Triton computes it: ``server/metrics/_system.py``) and by a sweep's ``host_cpu``
(``bench/host_cpu.py``). Busy is every field but idle and I/O wait, steal included (time the
hypervisor gave elsewhere is not ours to use); guest time is inside user already, so the
fields after steal are not read.
"""

from __future__ import annotations

from pathlib import Path

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
IDLE = ("idle", "iowait")
BUSY = tuple(field for field in FIELDS if field not in IDLE)
STAT = Path("/proc/stat")


def parse_cpu_line(line: str) -> dict[str, int] | None:
    """The fields of ``/proc/stat``'s aggregate line (those a kernel leaves out as 0), or
    None for any other line."""
    words = line.split()
    if len(words) < 5 or words[0] != "cpu":
        return None
    try:
        values = [int(word) for word in words[1 : 1 + len(FIELDS)]]
    except ValueError:
        return None
    return dict(zip(FIELDS, values + [0] * (len(FIELDS) - len(values)), strict=True))


def read_cpu_times(path: Path = STAT) -> dict[str, int] | None:
    """The aggregate line's fields now, or None where it cannot be read."""
    try:
        with path.open(encoding="ascii") as stat:
            return parse_cpu_line(stat.readline())
    except (OSError, ValueError):
        return None


__all__ = ["BUSY", "FIELDS", "IDLE", "STAT", "parse_cpu_line", "read_cpu_times"]
