"""The gRPC front end, on the server's own event loop: gRPC's C++ server (``native.py``) where
it was built, else grpcio's ``grpc.aio`` server; both serve the same ``InferenceService``.

``GrpcOptions.implementation`` picks one: ``auto`` (native when built), ``native`` (an error
when not built), ``grpcio``. Options follow tritonserver's flags: ``--grpc-port``,
``--grpc-address``,
``--grpc-infer-response-compression-level``, the message size limit (Triton uses
``INT32_MAX`` for both directions), and the keepalive and connection-age flags, which become
the same gRPC core channel arguments as in Triton's ``src/grpc/grpc_server.cc`` (``Server``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from workbench.core.contract import ServingCore
from workbench.core.trace_settings import TraceManager
from workbench.errors import InvalidArgumentError, UnavailableError
from workbench.server.grpc.native import NativeServer
from workbench.server.grpc.native import available as native_available
from workbench.server.grpc.response_codec import MAX_MESSAGE_BYTES
from workbench.server.grpc.restriction import RestrictionInterceptor
from workbench.server.grpc.service import InferenceService
from workbench.server.grpc.unparsable import add_service, method_handlers
from workbench.server.log_settings import LogSettings
from workbench.server.restricted import Restrictions
from workbench.server.shared_memory import SharedMemoryRegistry

#: a gRPC core channel argument is a C ``int``
INT32_MAX = 2**31 - 1
#: ``--grpc-infer-response-compression-level`` -> the algorithm gRPC core picks for that level
#: when the client accepts gzip and deflate (as grpcio and Triton's clients do): the first of
#: its ranking for ``low``, the middle one for ``medium``, the last for ``high``.
COMPRESSION_LEVELS = {
    "none": None,
    "low": grpc.Compression.Gzip,
    "medium": grpc.Compression.Deflate,
    "high": grpc.Compression.Deflate,
}


@dataclass(frozen=True, slots=True)
class GrpcKeepalive:
    """tritonserver's ``--grpc-keepalive-*``, ``--grpc-http2-*`` and ``--grpc-max-connection-age*``
    flags, in milliseconds, with its defaults (``KeepAliveOptions``, ``src/grpc/grpc_server.h``).

    Together they bound idle and abusive connections: a peer that pings too often is sent
    GOAWAY after ``http2_max_ping_strikes`` bad pings, a dead one is dropped when a keepalive
    ping goes unanswered, and a ``max_connection_age_ms`` makes clients reconnect.
    """

    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    #: 0: no limit (Triton then leaves the channel argument out, as here)
    max_connection_age_ms: int = 0
    max_connection_age_grace_ms: int = 0

    def __post_init__(self) -> None:
        for name, value in _keepalive_values(self):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32_MAX:
                raise InvalidArgumentError(
                    f"invalid argument for --grpc-{name}: {value!r} (expected 0 to {INT32_MAX})"
                )

    def channel_arguments(self) -> list[tuple[str, int]]:
        """gRPC core's server channel arguments for these settings."""
        arguments = [
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.http2_max_pings_without_data),
            # GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS is spelt without "recv"
            (
                "grpc.http2.min_ping_interval_without_data_ms",
                self.http2_min_recv_ping_interval_without_data_ms,
            ),
            ("grpc.http2.max_ping_strikes", self.http2_max_ping_strikes),
        ]
        if self.max_connection_age_ms:
            arguments.append(("grpc.max_connection_age_ms", self.max_connection_age_ms))
        if self.max_connection_age_grace_ms:
            arguments.append(("grpc.max_connection_age_grace_ms", self.max_connection_age_grace_ms))
        return arguments


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
    #: keepalive pings and connection age, as tritonserver's flags set them
    keepalive: GrpcKeepalive = field(default_factory=GrpcKeepalive)
    #: ``auto`` | ``native`` | ``grpcio``: which gRPC server carries the calls (workbench only)
    implementation: str = "auto"


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
        #: ``native`` or ``grpcio``: the server that carries the calls
        self.implementation = _implementation(options.implementation)

    async def start(self) -> int:
        """Listen on ``address:port`` (port 0: an ephemeral one); return the bound port."""
        limit = self.options.max_message_bytes
        arguments: list[tuple[str, int | str]] = [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            # Without this a second server could share a port in use instead of failing.
            ("grpc.so_reuseport", 0),
            *self.options.keepalive.channel_arguments(),
        ]
        target = _target(self.options.address, self.options.port)
        if self.implementation == "native":
            server: Any = NativeServer(method_handlers(self.service), self.options.restrictions)
            port = server.start(target, arguments)
        else:
            server = grpc.aio.server(
                options=arguments,
                # Only when something is restricted: an interceptor costs every call.
                interceptors=[RestrictionInterceptor(self.options.restrictions)]
                if self.options.restrictions
                else None,
            )
            add_service(self.service, server, compressing=self.service.compression is not None)
            try:
                port = server.add_insecure_port(target)
            except RuntimeError:
                port = 0
            if port:
                await server.start()
        if port == 0:
            await server.stop(None)
            raise UnavailableError(
                f"cannot listen on {target}: the address is in use or not available"
            )
        self._server, self.port = server, port
        return port

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls, let running ones finish for up to ``grace_s``, then close."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace_s)


IMPLEMENTATIONS = ("auto", "native", "grpcio")
#: what to do when the native front end is asked for and missing
BUILD_NATIVE = (
    "install gRPC's C++ library (Debian: apt-get install libgrpc++-dev pkg-config) and "
    "reinstall triton-workbench"
)


def _implementation(asked: str) -> str:
    """The gRPC server ``asked`` (an ``implementation`` option) names here."""
    if asked == "grpcio" or (asked == "auto" and not native_available()):
        return "grpcio"
    if not native_available():
        raise InvalidArgumentError(
            f"the native gRPC front end is not built in this installation: {BUILD_NATIVE}"
        )
    return "native"


def _check(options: GrpcOptions) -> None:
    if options.implementation not in IMPLEMENTATIONS:
        raise InvalidArgumentError(
            f"invalid argument for --grpc-implementation: '{options.implementation}' "
            "(expected auto, native or grpcio)"
        )
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


def _keepalive_values(keepalive: GrpcKeepalive) -> list[tuple[str, object]]:
    """(the flag's name without ``--grpc-``, value) of each numeric keepalive setting."""
    return [
        ("keepalive-time", keepalive.keepalive_time_ms),
        ("keepalive-timeout", keepalive.keepalive_timeout_ms),
        ("http2-max-pings-without-data", keepalive.http2_max_pings_without_data),
        (
            "http2-min-recv-ping-interval-without-data",
            keepalive.http2_min_recv_ping_interval_without_data_ms,
        ),
        ("http2-max-ping-strikes", keepalive.http2_max_ping_strikes),
        ("max-connection-age", keepalive.max_connection_age_ms),
        ("max-connection-age-grace", keepalive.max_connection_age_grace_ms),
    ]


def _target(address: str, port: int) -> str:
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    return f"{host}:{port}"


__all__ = [
    "COMPRESSION_LEVELS",
    "IMPLEMENTATIONS",
    "GrpcFrontend",
    "GrpcKeepalive",
    "GrpcOptions",
]
