"""Sweeps and load generation over Triton's public API, with results as pandas.

``sweep()`` measures a model at every combination of config settings and client
concurrency; ``SweepResult`` holds the rows, draws the curves and picks the best config.
"""

from __future__ import annotations

from workbench.bench.plan import CONFIG_AXES, SweepPoint, apply_settings, plan_points
from workbench.bench.result import (
    BestConfig,
    PartialSweepWarning,
    SaturatedHostWarning,
    SweepInterrupted,
    SweepResult,
)
from workbench.bench.runner import Endpoints, Progress
from workbench.bench.selection import select_best
from workbench.bench.sweep import sweep

__all__ = [
    "CONFIG_AXES",
    "BestConfig",
    "Endpoints",
    "PartialSweepWarning",
    "Progress",
    "SaturatedHostWarning",
    "SweepInterrupted",
    "SweepPoint",
    "SweepResult",
    "apply_settings",
    "plan_points",
    "select_best",
    "sweep",
]
