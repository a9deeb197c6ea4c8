"""Server-side time per request and batch size over a measurement window, from Triton's
statistics extension.

Triton's statistics are cumulative (count and total nanoseconds per phase since load), so a
window's averages are the difference of two snapshots: ``(ns_after - ns_before) /
(count_after - count_before)``. That is what perf_analyzer reports as server queue and
compute times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Triton's per-request phases, in the order a request goes through them
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(frozen=True)
class StatsSnapshot:
    """Cumulative success count and (count, ns) per phase of one model, summed over versions."""

    success: int
    phases: Mapping[str, tuple[int, int]]
    #: inferences (batch rows) and model executions: their ratio is the average batch size
    inferences: int = 0
    executions: int = 0

    @classmethod
    def from_response(cls, response: Mapping[str, Any], model: str) -> StatsSnapshot:
        """From a ``GET /v2/models/{model}/stats`` reply (JSON, as tritonclient returns it)."""
        success = inferences = executions = 0
        phases = {phase: (0, 0) for phase in PHASES}
        for entry in response.get("model_stats", []):
            if entry.get("name") != model:
                continue
            inferences += int(entry.get("inference_count", 0))
            executions += int(entry.get("execution_count", 0))
            stats = entry.get("inference_stats", {})
            success += int(stats.get("success", {}).get("count", 0))
            for phase in PHASES:
                count, ns = phases[phase]
                duration = stats.get(phase, {})
                count += int(duration.get("count", 0))
                phases[phase] = (count, ns + int(duration.get("ns", 0)))
        return cls(success, phases, inferences, executions)

    def per_request_us(self, before: StatsSnapshot) -> dict[str, float]:
        """``queue_us`` ... ``compute_output_us``: average microseconds per request between
        ``before`` and this snapshot (NaN for a phase with no request in between)."""
        averages: dict[str, float] = {}
        for phase in PHASES:
            count = self.phases[phase][0] - before.phases[phase][0]
            ns = self.phases[phase][1] - before.phases[phase][1]
            averages[f"{phase}_us"] = ns / count / 1000.0 if count > 0 else float("nan")
        return averages

    def avg_batch(self, before: StatsSnapshot) -> float:
        """Inferences per model execution between ``before`` and this snapshot: the batch
        size the scheduler formed on average (NaN when the model did not run)."""
        executions = self.executions - before.executions
        inferences = self.inferences - before.inferences
        return inferences / executions if executions > 0 else float("nan")

    def successes_since(self, before: StatsSnapshot) -> int:
        return self.success - before.success


__all__ = ["PHASES", "StatsSnapshot"]
