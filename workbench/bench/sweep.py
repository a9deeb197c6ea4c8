"""``sweep()`` and ``start()``: run a planned sweep off the caller's thread and hand back its
result (``runner.py`` measures it)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workbench.bench.result import SupportsEdit, SweepResult
from workbench.bench.runner import (
    Endpoints,
    Listener,
    SweepRunner,
    SweepSpec,
    base_config,
    start_sweep,
)


def sweep(
    model: str,
    model_dir: Path,
    endpoints: Endpoints,
    *,
    listeners: Iterable[Listener] = (),
    wait: bool = True,
    **planning: Any,
) -> SweepResult:
    """Measure ``model`` as ``SweepSpec.plan(model, model_dir, **planning)`` says (``settings``,
    ``concurrency``, ``duration_s``, ``warmup_s``, ``protocol``, ``inputs``, ``shapes``).

    With ``wait=False`` it returns at once with a running ``SweepResult`` whose rows grow
    (``result.wait()`` blocks, ``result.stop()`` ends it early); listeners hear of every row.
    """
    spec = SweepSpec.plan(model, model_dir, **planning)
    return start(spec, endpoints, listeners=listeners, wait=wait)


def start(
    spec: SweepSpec,
    endpoints: Endpoints,
    *,
    listeners: Iterable[Listener] = (),
    wait: bool = True,
    bench: SupportsEdit | None = None,
) -> SweepResult:
    """Run ``spec`` off the caller's thread; its result (finished, with ``wait``). ``bench``
    (a ``Workbench``) lets ``result.apply_best()`` write the best config with no argument."""
    base = base_config(spec.model_dir)
    result = SweepResult(
        spec.model, base, spec.axes, options=spec.options, finished=False, bench=bench
    )
    start_sweep(SweepRunner(spec, endpoints, result, list(listeners)))
    return result.wait() if wait else result


__all__ = ["start", "sweep"]
