"""The gRPC front end's part of a trace: GRPC_WAITREAD_START/END, INFER_RESPONSE_COMPLETE and
GRPC_SEND_START/END, as Triton 2.51's ``ModelInferHandler`` records them
(``src/grpc/infer_handler.cc``, ``infer_handler.h``).

Triton keeps these timestamps aside and writes them into the trace together once the call is
answered, so they follow the core's in its file; so do we. Its GRPC_WAITREAD_START is when its
handler began waiting for a call, before the call arrived; ``grpc.aio`` hands us a call that has
been read, so both WAITREAD timestamps are when the handler got it. GRPC_SEND_END is when the
call is done (``context.add_done_callback``), where the trace is written out. In opentelemetry
mode the call's metadata goes to sampling (``metadata``), as Triton's ``GrpcServerCarrier``:
a ``traceparent`` there is the parent of its spans.
"""

from __future__ import annotations

import time
from typing import Any

from workbench.core.trace import InferenceTrace


def metadata(context: Any) -> dict[str, str]:
    """A call's text metadata by (lower-case) key; empty without a call context."""
    if context is None:
        return {}
    pairs = context.invocation_metadata() or ()
    return {key.lower(): value for key, value in pairs if isinstance(value, str)}


class GrpcTimestamps:
    """The front-end timestamps of one traced ``ModelInfer`` call, written when it ends."""

    def __init__(self, trace: InferenceTrace) -> None:
        self.trace = trace
        now = time.monotonic_ns()
        self.stamps = [("GRPC_WAITREAD_START", now), ("GRPC_WAITREAD_END", now)]

    def stamp(self, name: str) -> None:
        self.stamps.append((name, time.monotonic_ns()))

    def finish(self, context: Any) -> None:
        """The reply is on its way: write the trace when the call is done (at once without a
        call context, as when a handler is called directly)."""
        self.stamp("GRPC_SEND_START")
        if context is None:
            self._sent()
        else:
            context.add_done_callback(lambda _call: self._sent())

    def _sent(self) -> None:
        self.stamp("GRPC_SEND_END")
        self.release()

    def release(self) -> None:
        """Write the timestamps kept aside into the trace, and the trace out."""
        for name, ns in self.stamps:
            self.trace.capture(name, ns)
        self.trace.release()


class StreamTimestamps(GrpcTimestamps):
    """The front-end timestamps of one traced request of a ``ModelStreamInfer`` call, as
    Triton 2.51's ``ModelStreamInferHandler`` records them (observed): INFER_RESPONSE_COMPLETE
    once, at the first response, and GRPC_SEND_START/END around every response written (a
    decoupled model's bare final flag is not written, so it has none unless the request asked
    for an empty final response). The trace is written once the request's last response is."""

    def __init__(self, trace: InferenceTrace) -> None:
        super().__init__(trace)
        self.completed = False

    def complete(self) -> None:
        """The core answered (its first response, or its error)."""
        if not self.completed:
            self.completed = True
            self.stamp("INFER_RESPONSE_COMPLETE")


__all__ = ["GrpcTimestamps", "StreamTimestamps", "metadata"]
