"""The gRPC front end: a ``grpc.aio`` server on the server's own event loop.

Options follow tritonserver's flags: ``--grpc-port``, ``--grpc-address``,
``--grpc-infer-response-compression-level`` and the message size limit (Triton uses
``INT32_MAX`` for both directions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from workbench.core.contract import ServingCore
from workbench.core.trace_settings import TraceManager
from workbench.errors import InvalidArgumentError, UnavailableError
from workbench.server.grpc.response_codec import MAX_MESSAGE_BYTES
from workbench.server.grpc.restriction import RestrictionInterceptor
from workbench.server.grpc.service import InferenceService
from workbench.server.grpc.unparsable import add_service
from workbench.server.log_settings import LogSettings
from workbench.server.restricted import Restrictions
from workbench.server.shared_memory import SharedMemoryRegistry

#: ``--grpc-infer-response-compression-level`` -> the algorithm gRPC core picks for that level
#: when the client accepts gzip and deflate (as grpcio and Triton's clients do): the first of
#: its ranking for ``low``, the middle one for ``medium``, the last for ``high``.
COMPRESSION_LEVELS = {
    "none": None,
    "low": grpc.Compression.Gzip,
    "medium": grpc.Compression.Deflate,
    "high": grpc.Compression.Deflate,
}


@dataclass(slots=True)
class GrpcOptions:
    """The gRPC endpoint's settings, named after tritonserver's flags."""

    port: int = 8001
    address: str = "127.0.0.1"
    max_message_bytes: int = MAX_MESSAGE_BYTES
    #: ``none`` | ``low`` | ``medium`` | ``high``, for ModelInfer and ModelStreamInfer responses
    infer_compression: str = "none"
    #: ``--grpc-restricted-protocol``: group -> the metadata key its calls must carry
    restrictions: Restrictions = field(default_factory=dict)


class GrpcFrontend:
    """Serves ``inference.GRPCInferenceService`` for one core; start and stop on its loop."""

    def __init__(
        self,
        core: ServingCore,
        options: GrpcOptions,
        *,
        log_settings: LogSettings,
        extensions: tuple[str, ...],
        shared_memory: SharedMemoryRegistry | None = None,
        tracer: TraceManager | None = None,
    ) -> None:
        _check(options)
        self.core = core
        self.options = options
        self.service = InferenceService(
            core,
            log_settings=log_settings,
            extensions=extensions,
            max_message_bytes=options.max_message_bytes,
            compression=COMPRESSION_LEVELS[options.infer_compression.lower()],
            shared_memory=shared_memory,
            tracer=tracer,
        )
        self._server: Any = None
        self.port = 0

    async def start(self) -> int:
        """Listen on ``address:port`` (port 0: an ephemeral one); return the bound port."""
        limit = self.options.max_message_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", limit),
                ("grpc.max_receive_message_length", limit),
                # Without this a second server could share a port in use instead of failing.
                ("grpc.so_reuseport", 0),
            ],
            # Only when something is restricted: an interceptor costs every call.
            interceptors=[RestrictionInterceptor(self.options.restrictions)]
            if self.options.restrictions
            else None,
        )
        add_service(self.service, server)
        target = _target(self.options.address, self.options.port)
        try:
            port = server.add_insecure_port(target)
        except RuntimeError:
            port = 0
        if port == 0:
            await server.stop(None)
            raise UnavailableError(
                f"cannot listen on {target}: the address is in use or not available"
            )
        await server.start()
        self._server, self.port = server, port
        return port

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls, let running ones finish for up to ``grace_s``, then close."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace_s)


def _check(options: GrpcOptions) -> None:
    if options.infer_compression.lower() not in COMPRESSION_LEVELS:
        raise InvalidArgumentError(
            "invalid argument for --grpc-infer-response-compression-level: "
            f"'{options.infer_compression}' (expected none, low, medium or high)"
        )
    limit = options.max_message_bytes
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_MESSAGE_BYTES:
        raise InvalidArgumentError(
            f"max_message_bytes must be between 1 and {MAX_MESSAGE_BYTES}, got {limit!r}"
        )


def _target(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"{host}:{port}"


__all__ = ["COMPRESSION_LEVELS", "GrpcFrontend", "GrpcOptions"]
