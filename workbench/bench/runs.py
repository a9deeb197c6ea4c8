"""``sweep()``: plan a sweep, start it off the caller's thread, and hand back its result."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.bench.load_generator import PROTOCOLS
from workbench.bench.plan import plan_concurrency, plan_points
from workbench.bench.result import SweepResult
from workbench.bench.sweep import (
    Endpoints,
    Listener,
    SweepRunner,
    SweepSpec,
    base_config,
    start_sweep,
)
from workbench.errors import InvalidArgumentError


def sweep(
    model: str,
    model_dir: Path,
    endpoints: Endpoints,
    *,
    settings: Mapping[str, Any],
    concurrency: int | Sequence[int] = (1, 4, 16),
    duration_s: float = 3.0,
    warmup_s: float | None = None,
    protocol: str = "http",
    inputs: Mapping[str, Any] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    listeners: Iterable[Listener] = (),
    wait: bool = True,
) -> SweepResult:
    """Measure ``model`` at every combination of ``settings`` (see ``plan_points``) and
    ``concurrency`` level, ``duration_s`` each, after ``warmup_s`` per config (default: half
    the duration, at most 1 s).

    With ``wait=False`` it returns at once with a running ``SweepResult`` whose rows grow
    (``result.wait()`` blocks, ``result.stop()`` ends it early); listeners hear of every row.
    """
    if protocol not in PROTOCOLS:
        raise InvalidArgumentError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
    if duration_s <= 0:
        raise InvalidArgumentError(f"duration_s must be positive, got {duration_s}")
    points = plan_points(settings)
    levels = plan_concurrency(concurrency)
    warmup = min(1.0, duration_s / 2) if warmup_s is None else max(0.0, warmup_s)
    spec = SweepSpec(
        model, Path(model_dir), points, levels, duration_s, warmup, protocol, inputs, shapes
    )
    options = {"protocol": protocol, "duration_s": duration_s, "warmup_s": warmup}
    options["concurrency"] = levels
    options["measurements"] = spec.measurements  # what a complete result holds
    axes = [name for name, values in settings.items() if values is not None]
    result = SweepResult(model, base_config(Path(model_dir)), axes, options=options, finished=False)
    runner = SweepRunner(spec, endpoints, result, list(listeners))
    start_sweep(runner)
    return result.wait() if wait else result


__all__ = ["sweep"]
