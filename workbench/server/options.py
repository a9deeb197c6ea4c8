"""The server's options, one object: from ``Server(...)``'s keywords or from the CLI's flags.

Every option is named after the tritonserver flag it mirrors. ``ServerOptions.from_keywords``
takes what a notebook passes to ``Server(...)``; ``ServerOptions.from_flags`` what the CLI
parsed; both check the values before anything starts.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workbench.core import CoreOptions
from workbench.core.rate_limiter import RATE_LIMIT_MODES
from workbench.errors import InvalidArgumentError
from workbench.server.grpc import GrpcOptions
from workbench.server.grpc.frontend import GrpcKeepalive
from workbench.server.grpc.response_codec import MAX_MESSAGE_BYTES as MAX_GRPC_MESSAGE_BYTES
from workbench.server.http.limits import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_HEADER_BYTES,
    HttpLimits,
)
from workbench.server.metrics import MetricsOptions, parse_metrics_config
from workbench.server.restricted import Restrictions, grpc_restrictions, http_restrictions
from workbench.server.trace_config import parse_trace_config

log = logging.getLogger("workbench.server")
#: Triton's ``--http-max-input-size`` default.
DEFAULT_MAX_INPUT_BYTES = 64 * 1024 * 1024
#: Triton's gRPC keepalive and connection-age defaults
_KEEPALIVE = GrpcKeepalive()


@dataclass(slots=True)
class ServerOptions:
    """Front-end options, named after tritonserver's flags."""

    http_port: int = 8000
    host: str = "127.0.0.1"
    exit_timeout_secs: float = 30.0
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    log_verbose: int = 0
    #: ``--http-restricted-api``: group -> the header its requests must carry
    http_restrictions: Restrictions = field(default_factory=dict)
    #: idle keep-alive and request-head timeouts, request-head size limit
    http_limits: HttpLimits = field(default_factory=HttpLimits)
    core: CoreOptions = field(default_factory=CoreOptions)
    #: ``None``: no gRPC endpoint (tritonserver's ``--allow-grpc=false``)
    grpc: GrpcOptions | None = field(default_factory=GrpcOptions)
    #: ``None``: no metrics endpoint (``--allow-metrics=false``)
    metrics: MetricsOptions | None = field(default_factory=MetricsOptions)

    @classmethod
    def from_keywords(
        cls,
        *,
        http_port: int = 8000,
        host: str = "127.0.0.1",
        model_control_mode: str = "none",
        load_model: Sequence[str] = (),
        repository_poll_secs: float = 15.0,
        strict_model_config: bool = False,
        strict_readiness: bool = True,
        model_config_name: str | None = None,
        exit_timeout_secs: float = 30.0,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        log_verbose: int = 0,
        cache_size: int = 0,
        rate_limit: str = "off",
        rate_limit_resources: Mapping[str, int] | None = None,
        grpc_port: int = 8001,
        grpc_address: str | None = None,
        allow_grpc: bool = True,
        grpc_infer_compression: str = "none",
        grpc_implementation: str = "auto",
        grpc_max_message_bytes: int = MAX_GRPC_MESSAGE_BYTES,
        grpc_keepalive_time: int = _KEEPALIVE.keepalive_time_ms,
        grpc_keepalive_timeout: int = _KEEPALIVE.keepalive_timeout_ms,
        grpc_keepalive_permit_without_calls: bool = _KEEPALIVE.keepalive_permit_without_calls,
        grpc_http2_max_pings_without_data: int = _KEEPALIVE.http2_max_pings_without_data,
        grpc_http2_min_recv_ping_interval_without_data: int = (
            _KEEPALIVE.http2_min_recv_ping_interval_without_data_ms
        ),
        grpc_http2_max_ping_strikes: int = _KEEPALIVE.http2_max_ping_strikes,
        grpc_max_connection_age: int = _KEEPALIVE.max_connection_age_ms,
        grpc_max_connection_age_grace: int = _KEEPALIVE.max_connection_age_grace_ms,
        metrics_port: int = 8002,
        metrics_address: str | None = None,
        allow_metrics: bool = True,
        allow_cpu_metrics: bool = True,
        allow_gpu_metrics: bool = True,
        metrics_interval_ms: float = 2000,
        metrics_config: Sequence[str] = (),
        http_restricted_api: str | Sequence[str] = (),
        grpc_restricted_protocol: str | Sequence[str] = (),
        allow_model_upload: bool = True,
        http_idle_timeout_secs: float = DEFAULT_IDLE_TIMEOUT_S,
        http_header_timeout_secs: float = DEFAULT_HEADER_TIMEOUT_S,
        http_max_header_size: int = DEFAULT_MAX_HEADER_BYTES,
        trace_config: Sequence[str] = (),
    ) -> ServerOptions:
        """The options from ``Server(...)``'s keywords, each named after a tritonserver flag."""
        _check_limits(cache_size, rate_limit, rate_limit_resources or {})
        grpc_options = GrpcOptions(
            port=grpc_port,
            address=grpc_address or host,
            max_message_bytes=grpc_max_message_bytes,
            infer_compression=grpc_infer_compression,
            implementation=grpc_implementation,
            restrictions=grpc_restrictions(grpc_restricted_protocol),
            keepalive=GrpcKeepalive(
                keepalive_time_ms=grpc_keepalive_time,
                keepalive_timeout_ms=grpc_keepalive_timeout,
                keepalive_permit_without_calls=grpc_keepalive_permit_without_calls,
                http2_max_pings_without_data=grpc_http2_max_pings_without_data,
                http2_min_recv_ping_interval_without_data_ms=(
                    grpc_http2_min_recv_ping_interval_without_data
                ),
                http2_max_ping_strikes=grpc_http2_max_ping_strikes,
                max_connection_age_ms=grpc_max_connection_age,
                max_connection_age_grace_ms=grpc_max_connection_age_grace,
            ),
        )
        metrics_options = MetricsOptions(
            port=metrics_port,
            address=metrics_address or host,
            allow_cpu=allow_cpu_metrics,
            allow_gpu=allow_gpu_metrics,
            interval_ms=round(metrics_interval_ms),
            config=parse_metrics_config(metrics_config),
        )
        return cls(
            http_port=http_port,
            host=host,
            exit_timeout_secs=exit_timeout_secs,
            max_input_bytes=max_input_bytes,
            log_verbose=log_verbose,
            http_restrictions=http_restrictions(http_restricted_api),
            http_limits=_http_limits(
                http_idle_timeout_secs, http_header_timeout_secs, http_max_header_size
            ),
            core=CoreOptions(
                control_mode=model_control_mode,
                load_models=tuple(load_model),
                poll_secs=repository_poll_secs,
                strict_config=strict_model_config,
                strict_readiness=strict_readiness,
                config_name=model_config_name,
                cache_size=cache_size,
                rate_limit=rate_limit.lower(),
                rate_limit_resources=dict(rate_limit_resources or {}),
                allow_model_upload=allow_model_upload,
                trace=parse_trace_config(trace_config),
            ),
            grpc=grpc_options if allow_grpc else None,
            metrics=metrics_options if allow_metrics else None,
        )

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> ServerOptions:
        """The options of ``workbench serve``'s parsed flags."""
        return cls.from_keywords(
            http_port=args.http_port,
            host=args.http_address,
            model_control_mode=args.model_control_mode,
            load_model=args.load_model,
            repository_poll_secs=args.repository_poll_secs,
            strict_model_config=args.strict_model_config or args.disable_auto_complete_config,
            strict_readiness=args.strict_readiness,
            model_config_name=args.model_config_name,
            exit_timeout_secs=args.exit_timeout_secs,
            max_input_bytes=args.http_max_input_size,
            log_verbose=args.log_verbose,
            cache_size=cache_size(args.cache_config, args.response_cache_byte_size),
            rate_limit=args.rate_limit,
            rate_limit_resources=rate_limit_resources(args.rate_limit_resource),
            allow_grpc=args.allow_grpc,
            grpc_address=args.grpc_address,
            grpc_port=args.grpc_port,
            grpc_infer_compression=args.grpc_infer_response_compression_level,
            grpc_implementation=args.grpc_implementation,
            grpc_max_message_bytes=args.grpc_max_message_size,
            grpc_keepalive_time=args.grpc_keepalive_time,
            grpc_keepalive_timeout=args.grpc_keepalive_timeout,
            grpc_keepalive_permit_without_calls=args.grpc_keepalive_permit_without_calls,
            grpc_http2_max_pings_without_data=args.grpc_http2_max_pings_without_data,
            grpc_http2_min_recv_ping_interval_without_data=(
                args.grpc_http2_min_recv_ping_interval_without_data
            ),
            grpc_http2_max_ping_strikes=args.grpc_http2_max_ping_strikes,
            grpc_max_connection_age=args.grpc_max_connection_age,
            grpc_max_connection_age_grace=args.grpc_max_connection_age_grace,
            allow_metrics=args.allow_metrics,
            allow_cpu_metrics=args.allow_cpu_metrics,
            allow_gpu_metrics=args.allow_gpu_metrics,
            metrics_address=args.metrics_address,
            metrics_port=args.metrics_port,
            metrics_interval_ms=args.metrics_interval_ms,
            metrics_config=args.metrics_config,
            http_restricted_api=args.http_restricted_api,
            grpc_restricted_protocol=args.grpc_restricted_protocol,
            allow_model_upload=args.allow_model_upload,
            http_idle_timeout_secs=args.http_idle_timeout_secs,
            http_header_timeout_secs=args.http_header_timeout_secs,
            http_max_header_size=args.http_max_header_size,
            trace_config=args.trace_config,
        )


def _check_limits(cache_size: int, rate_limit: str, resources: Mapping[str, int]) -> None:
    """Reject bad response-cache and rate-limiter settings before anything starts."""
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 0:
        raise InvalidArgumentError(
            f"cache_size must be a number of bytes (0: no response cache), got {cache_size!r}"
        )
    if rate_limit.lower() not in RATE_LIMIT_MODES:
        raise InvalidArgumentError(
            f"invalid argument for --rate-limit: '{rate_limit}' (expected off or execution_count)"
        )
    for name, count in resources.items():
        if not name or isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidArgumentError(
                f"rate limiter resource {name!r} needs a non-negative count, got {count!r}"
            )


def _http_limits(idle_s: float, header_s: float, max_header_bytes: int) -> HttpLimits:
    try:
        return HttpLimits(idle_s, header_s, max_header_bytes)
    except ValueError as exc:
        raise InvalidArgumentError(f"invalid HTTP connection limit: {exc}") from exc


def cache_size(cache_config: Sequence[str], response_cache_byte_size: str | None) -> int:
    """Bytes of the local response cache from ``--cache-config`` flags (0: no cache)."""
    if response_cache_byte_size is not None:
        if cache_config:
            raise InvalidArgumentError(
                "Incompatible flags --response-cache-byte-size and --cache-config both "
                "provided. Please provide one or the other."
            )
        cache_config = [f"local,size={response_cache_byte_size}"]
    settings: dict[str, dict[str, str]] = {}
    for text in cache_config:
        name, setting, value = _cache_setting(text)
        settings.setdefault(name, {})[setting] = value
    if not settings:
        return 0
    unknown = sorted(set(settings) - {"local"})
    if unknown:
        raise InvalidArgumentError(
            f"cache '{unknown[0]}' is not available: only the 'local' cache is supported"
        )
    local = settings["local"]
    for ignored in sorted(set(local) - {"size"}):
        log.warning("--cache-config: the local cache ignores setting '%s'", ignored)
    if "size" not in local:
        raise InvalidArgumentError(
            "Failed to initialize LocalCache: config didn't contain a valid 'size' field."
        )
    size = local["size"]
    if not size.isdigit():
        raise InvalidArgumentError(
            f"Failed to initialize LocalCache: invalid size '{size}': expected a number of bytes"
        )
    return int(size)


def _cache_setting(text: str) -> tuple[str, str, str]:
    """``<cache>,<setting>=<value>`` (tritonserver's format and messages)."""
    name, comma, rest = text.partition(",")
    if not comma or not name:
        raise InvalidArgumentError(
            "No cache specified. --cache-config option format is "
            f"<cache name>,<setting>=<value>. Got {text}"
        )
    setting, equals, value = rest.partition("=")
    if not equals or not setting or not value:
        raise InvalidArgumentError(
            f"--cache-config option format is '<cache name>,<setting>=<value>'. Got {text}"
        )
    return name, setting, value


def rate_limit_resources(specs: Sequence[str]) -> dict[str, int]:
    """``--rate-limit-resource <name>:<count>[:<device>]`` flags as one count per name.

    Devices are accepted but not modelled (one pool per name), so a name listed for several
    devices keeps its largest count.
    """
    resources: dict[str, int] = {}
    for spec in specs:
        parts = spec.split(":")
        numbers = parts[1:]
        if len(parts) not in (2, 3) or not parts[0] or not all(_is_int(n) for n in numbers):
            raise InvalidArgumentError(
                "--rate-limit-resource option format is '<resource_name>:<count>:<device>' "
                f"or '<resource_name>:<count>'. Got {spec}"
            )
        count = int(numbers[0])
        if count < 0:
            raise InvalidArgumentError(
                f"--rate-limit-resource: count of '{parts[0]}' must not be negative. Got {spec}"
            )
        resources[parts[0]] = max(count, resources.get(parts[0], 0))
    return resources


def _is_int(text: str) -> bool:
    return text.removeprefix("-").isdigit()


__all__ = ["DEFAULT_MAX_INPUT_BYTES", "ServerOptions", "cache_size", "rate_limit_resources"]
