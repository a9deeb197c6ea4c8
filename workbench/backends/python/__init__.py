"""Triton's Python backend: unchanged ``model.py`` files through a ``pb_utils`` shim."""

from __future__ import annotations

from workbench.backends.python._metric_registry import (
    REGISTRY as CUSTOM_METRICS,
)
from workbench.backends.python._metric_registry import (
    CustomMetricRegistry,
    MetricKind,
)
from workbench.backends.python._process_instance import ProcessModelInstance
from workbench.backends.python.backend import PythonBackend, PythonModelInstance

__all__ = [
    "CUSTOM_METRICS",
    "CustomMetricRegistry",
    "MetricKind",
    "ProcessModelInstance",
    "PythonBackend",
    "PythonModelInstance",
]
