"""Triton's Prometheus metrics endpoint (``--metrics-port``, ``GET /metrics``).

``MetricsService`` is the ASGI app; the hosting layer serves it on the metrics socket, creates
it after ``InferenceCore(...)`` and before ``core.start()``, and runs ``start``/``stop`` on the
serving loop. Per-model counters come from the same statistics as ``/v2/models/stats``.
"""

from __future__ import annotations

from workbench.server.metrics._config import MetricsOptions, parse_metrics_config
from workbench.server.metrics.service import MetricsService

__all__ = ["MetricsOptions", "MetricsService", "parse_metrics_config"]
