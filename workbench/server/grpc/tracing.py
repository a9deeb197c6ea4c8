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
        for name, ns in self.stamps:
            self.trace.capture(name, ns)
        self.trace.release()


__all__ = ["GrpcTimestamps", "metadata"]
