"""The HTTP front end's part of a trace: HTTP_RECV_START/END, INFER_RESPONSE_COMPLETE and
HTTP_SEND_START/END, as ``HTTPAPIServer`` captures them in Triton 2.51 (``src/http_server.cc``:
``StartTrace``, ``InferRequestClass::InferResponseComplete``, ``FinalizeResponse``).

The connection reads the clock for HTTP_RECV_* only while tracing is on (``HttpConnection``),
and a traced reply carries its trace to the connection, which writes the trace out once the
reply is sent (Triton writes it when the request is freed, after its send). In opentelemetry
mode the request's headers go to sampling: a ``traceparent`` there is the parent of its spans.
"""

from __future__ import annotations

import time

from workbench.core.trace import InferenceTrace
from workbench.core.trace_settings import TraceManager
from workbench.server.http.messages import HttpRequest


def sample(tracer: TraceManager, model: str, req: HttpRequest) -> InferenceTrace | None:
    """A trace for this infer request when it is sampled, with its HTTP_RECV_* timestamps."""
    carrier = _headers(req) if tracer.propagates else None
    trace = tracer.sample(model, carrier)
    if trace is not None and req.recv_end_ns:
        trace.capture("HTTP_RECV_START", req.recv_start_ns or req.recv_end_ns)
        trace.capture("HTTP_RECV_END", req.recv_end_ns)
    return trace


def _headers(req: HttpRequest) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in req.headers}


def response_complete(trace: InferenceTrace) -> None:
    """The core answered (INFER_RESPONSE_COMPLETE), also with a model's error; a request the
    core refused before any model saw it has no response, as in Triton."""
    if trace.reported:
        trace.capture("INFER_RESPONSE_COMPLETE", time.monotonic_ns())


def http_sent(trace: InferenceTrace, started_ns: int) -> None:
    """The reply went out (started at ``started_ns``): stamp it and write the trace."""
    trace.capture("HTTP_SEND_START", started_ns)
    trace.capture("HTTP_SEND_END", time.monotonic_ns())
    trace.release()


__all__ = ["http_sent", "response_complete", "sample"]
