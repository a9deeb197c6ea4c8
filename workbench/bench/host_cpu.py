"""How busy this machine's CPUs were while a sweep point was measured (``host_cpu``).

A sweep measures the server, the model's processes and the load on one machine. While its
cores are all busy, a point measures how those share them: the embedded server's Python front
end takes more CPU per inference than Triton's C++ one (371 against 262 µs for a CPU-bound
Python model on two cores, ``benchmarks/README.md``), so there a comparison that hinges on spare
cores (a second instance of a CPU-bound model) reads a smaller gain than real Triton shows on
the same machine. ``host_cpu`` in a sweep's rows says where that is so, and ``best()`` warns
when it chooses an instance count among such points (``SaturatedHostWarning``).

Read from ``/proc/stat`` (Linux, ``workbench/cpu_times.py``, as the server's
``nv_cpu_utilization`` gauge reads it) by the load generator around exactly its measured time.
Elsewhere, NaN. It is the whole host's: in a container limited
to some of its cores, other tenants count, and on a machine with many more cores than the
model has instances it stays low however busy the server's own threads are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from workbench.cpu_times import IDLE, STAT, parse_cpu_line, read_cpu_times

#: at or above this share of all cores busy, the cores are contended. Not 1: on the embedded
#: server the model's instances wait for the event loop between executions, so the machine
#: reads 0.84 busy where real Triton reads 0.99 (a CPU-bound Python model, max_batch_size 1,
#: two instances, concurrency 8, two cores; both at about 0.53 at concurrency 1)
SATURATED = 0.8


@dataclass(frozen=True)
class CpuTimes:
    """All CPUs' time so far (clock ticks): busy and in all."""

    busy: int
    total: int

    @classmethod
    def read(cls, path: Path = STAT) -> CpuTimes | None:
        """Now, or None where there is no ``/proc/stat``."""
        return cls._of(read_cpu_times(path))

    @classmethod
    def parse(cls, line: str) -> CpuTimes | None:
        """From ``/proc/stat``'s first line (None for any other)."""
        return cls._of(parse_cpu_line(line))

    @classmethod
    def _of(cls, fields: dict[str, int] | None) -> CpuTimes | None:
        if fields is None:
            return None
        total = sum(fields.values())
        return cls(total - sum(fields[name] for name in IDLE), total)


def busy_fraction(before: CpuTimes | None, after: CpuTimes | None) -> float:
    """The share of all cores' time that was busy between two readings (0 to 1; NaN when
    either is missing or no time passed)."""
    if before is None or after is None or after.total <= before.total:
        return math.nan
    share = (after.busy - before.busy) / (after.total - before.total)
    return min(max(share, 0.0), 1.0)


__all__ = ["SATURATED", "CpuTimes", "busy_fraction"]
