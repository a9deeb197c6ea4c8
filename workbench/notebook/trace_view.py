"""Recording a trace for the notebook facade (``Workbench.trace``): the requests are traced
through Triton's trace API (``workbench.bench.trace_session``) and reported as a
``TraceReport`` (``workbench.bench.trace_report``)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from workbench.bench.trace_report import TraceReport
from workbench.bench.trace_session import record_trace


def trace_model(http_address: str, model: str, requests: int, **options: Any) -> TraceReport:
    """Trace ``requests`` inferences of ``model`` (``record_trace``) and report them."""
    recording = record_trace(http_address, model, requests, **options)
    title = f"{model}: {requests} traced requests"
    return TraceReport(recording.entries, recording.files, title)


def trace_directory() -> Path:
    """A new private folder for a facade's trace files (``trace.json`` and its indexed files)."""
    return Path(tempfile.mkdtemp(prefix="workbench-trace-"))


__all__ = ["trace_directory", "trace_model"]
