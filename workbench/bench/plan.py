"""The grid of a sweep: which configurations to try, and how each one changes the config.

Pure functions over ``ModelConfig`` messages, so that planning is tested without a server.
The axes keep Triton's field names (``max_batch_size``, ``max_queue_delay_microseconds``) and
Model Analyzer's name for the instance count (``instance_count``).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.errors import InvalidArgumentError

#: the config settings a sweep can vary, in the order points are labelled
CONFIG_AXES = ("max_batch_size", "max_queue_delay_microseconds", "instance_count")

#: the smallest value each axis accepts
_MINIMUM = {"max_batch_size": 0, "max_queue_delay_microseconds": 0, "instance_count": 1}


@dataclass(frozen=True)
class SweepPoint:
    """One configuration to measure: the settings changed from the model's own config."""

    settings: tuple[tuple[str, int], ...]

    @property
    def label(self) -> str:
        """``max_batch_size=8, instance_count=2`` (``as is`` when nothing changes)."""
        return ", ".join(f"{key}={value}" for key, value in self.settings) or "as is"

    def as_dict(self) -> dict[str, int]:
        return dict(self.settings)


def _axis_values(name: str, values: Any) -> list[int]:
    items = [values] if isinstance(values, int) else list(values)
    if not items:
        raise InvalidArgumentError(f"sweep axis '{name}' has no values")
    for value in items:
        if isinstance(value, bool) or not isinstance(value, int) or value < _MINIMUM[name]:
            raise InvalidArgumentError(
                f"sweep axis '{name}': {value!r} is not an integer >= {_MINIMUM[name]}"
            )
    return items


def plan_points(axes: Mapping[str, Any]) -> list[SweepPoint]:
    """Every combination of the given axes (None or absent: the model's own value).

    ``axes`` maps names from ``CONFIG_AXES`` to a value or a list of values.
    """
    unknown = sorted(set(axes) - set(CONFIG_AXES))
    if unknown:
        raise InvalidArgumentError(
            f"unknown sweep setting(s) {', '.join(unknown)}; use {', '.join(CONFIG_AXES)}"
        )
    names = [name for name in CONFIG_AXES if axes.get(name) is not None]
    grids = [_axis_values(name, axes[name]) for name in names]
    return [
        SweepPoint(tuple(zip(names, combination, strict=True)))
        for combination in itertools.product(*grids)
    ]


def plan_concurrency(concurrency: int | Sequence[int]) -> list[int]:
    """The client concurrency levels, each a positive integer."""
    levels = [concurrency] if isinstance(concurrency, int) else list(concurrency)
    if not levels:
        raise InvalidArgumentError("concurrency has no values")
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise InvalidArgumentError(f"concurrency {level!r} is not an integer >= 1")
    return levels


def apply_settings(config: ModelConfig, settings: Mapping[str, int]) -> ModelConfig:
    """A copy of ``config`` with ``settings`` applied (``config`` is left as it is).

    ``max_queue_delay_microseconds`` turns dynamic batching on; ``instance_count`` sets the
    count of every instance group (adding one group of the default kind when there is none).
    """
    changed = ModelConfig()
    changed.CopyFrom(config)
    if "max_batch_size" in settings:
        changed.max_batch_size = settings["max_batch_size"]
    if "max_queue_delay_microseconds" in settings:
        delay = settings["max_queue_delay_microseconds"]
        changed.dynamic_batching.max_queue_delay_microseconds = delay
    if "instance_count" in settings:
        groups = changed.instance_group or [changed.instance_group.add()]
        for group in groups:
            group.count = settings["instance_count"]
    return changed


__all__ = [
    "CONFIG_AXES",
    "SweepPoint",
    "apply_settings",
    "plan_concurrency",
    "plan_points",
]
