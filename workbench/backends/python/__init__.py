"""Triton's Python backend: unchanged ``model.py`` files through a ``pb_utils`` shim.

Each instance runs in a stub process, as Triton's do (or, opted in, in the server's own).
A module's prefix says on which side of that process boundary it runs:

- ``_server_``, in the server: ``_server_instance`` (an instance: its stub, restarts, BLS
  pool), ``_server_stub`` (starts a stub and talks to it), ``_server_reader`` (reads a stub's
  replies on the loop), ``_server_metrics`` (the models' custom metric families);
- ``_stub_``, in a stub: ``stub`` (its entry point), ``_stub_requests`` (wire to ``pb_utils``
  requests and back), ``_stub_metrics`` (metric updates sent with the next reply);
- ``_model_``, wherever the model's code runs: ``_model_runner``, ``_model_loader``,
  ``_model_bridge`` (core tensors and BLS to ``pb_utils``), ``_model_sender``,
  ``_model_metrics``, ``_model_config``, ``_model_dlpack``, ``_model_errors``, and ``pb_utils``;
- ``_wire_``, what crosses: ``_wire_messages`` (message kinds and layouts), ``_wire_channel``
  (the framed socket), ``_wire_shm`` (tensors in shared memory).
"""

from __future__ import annotations

from workbench.backends.python._server_instance import ProcessModelInstance
from workbench.backends.python._server_metrics import (
    REGISTRY as CUSTOM_METRICS,
)
from workbench.backends.python._server_metrics import (
    CustomMetricRegistry,
    MetricKind,
)
from workbench.backends.python.backend import PythonBackend, PythonModelInstance

__all__ = [
    "CUSTOM_METRICS",
    "CustomMetricRegistry",
    "MetricKind",
    "ProcessModelInstance",
    "PythonBackend",
    "PythonModelInstance",
]
