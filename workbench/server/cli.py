"""The ``workbench`` command. ``workbench serve`` takes tritonserver's flag names."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable

from workbench.server.grpc.frontend import IMPLEMENTATIONS, GrpcKeepalive
from workbench.server.grpc.response_codec import MAX_MESSAGE_BYTES as MAX_GRPC_MESSAGE_BYTES
from workbench.server.hosting import Server
from workbench.server.http.limits import (
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_MAX_HEADER_BYTES,
)
from workbench.server.options import (
    DEFAULT_MAX_INPUT_BYTES,
    ServerOptions,
)
from workbench.server.restricted import CATEGORIES

log = logging.getLogger("workbench.server")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool(text: str) -> bool:
    """tritonserver's boolean flags: ``--strict-model-config=false`` and friends."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def add_serve_parser(commands: argparse._SubParsersAction) -> None:
    """Add ``workbench serve`` (tritonserver's flag names) to the command's subparsers."""
    parser = commands.add_parser(
        "serve",
        help="serve a model repository (tritonserver-compatible flags)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.set_defaults(handler=serve)
    flag = parser.add_argument
    flag(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        dest="model_repository",
        help="model repository: a folder, or s3://[host:port/]bucket/path, gs://bucket/path, "
        "as://account/container/path as tritonserver takes them (the 'cloud' extra; copied to "
        "a temporary folder, deleted at exit) (repeatable)",
    )
    flag("--http-port", type=int, default=8000, help="HTTP/REST port (0: any free port)")
    flag(
        "--http-address",
        default="127.0.0.1",
        help="address to listen on: this machine only unless you give e.g. 0.0.0.0 "
        "(tritonserver's default is 0.0.0.0)",
    )
    flag(
        "--model-control-mode",
        choices=("none", "explicit", "poll"),
        default="none",
        help="none: load everything at start; explicit: the load/unload API; poll: follow disk",
    )
    flag(
        "--load-model",
        action="append",
        default=[],
        help="model to load in explicit mode; '*' = all",
    )
    flag("--repository-poll-secs", type=float, default=15.0, help="poll mode's interval")
    flag(
        "--strict-model-config",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        help="true: no auto-completed configs",
    )
    flag("--disable-auto-complete-config", action="store_true", help="as --strict-model-config")
    flag(
        "--strict-readiness",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="ready only when every model is ready",
    )
    flag("--model-config-name", default=None, help="read configs/<NAME>.pbtxt when present")
    flag(
        "--exit-timeout-secs",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, the time for the whole exit (draining requests in flight, "
        "unloading models, their finalize); past it, python model stubs still running are "
        "killed and the exit status is 1",
    )
    flag(
        "--http-max-input-size",
        type=int,
        default=DEFAULT_MAX_INPUT_BYTES,
        help="largest HTTP request body in bytes",
    )
    flag("--log-verbose", type=int, default=0, help="0: info; 1 or more: debug")
    _add_http_limits(flag)
    _add_access(flag)
    _add_cache_and_rate_limit(flag)
    _add_grpc(flag)
    _add_metrics(flag)
    flag(
        "--trace-config",
        action="append",
        default=[],
        metavar="[<mode>,]<setting>=<value>",
        help="tracing, e.g. triton,file=/tmp/trace.json level=TIMESTAMPS rate=1 count=100 "
        "triton,log-frequency=50, or mode=opentelemetry opentelemetry,url=http://host:4318/"
        "v1/traces opentelemetry,resource=key=value opentelemetry,bsp_schedule_delay=5000 "
        "(repeatable; opentelemetry needs the 'trace' extra)",
    )


def _add_grpc(flag: Callable[..., object]) -> None:
    flag("--allow-grpc", type=_bool, nargs="?", const=True, default=True, help="serve gRPC")
    flag(
        "--grpc-address",
        default="127.0.0.1",
        help="address to listen on (tritonserver's default is 0.0.0.0)",
    )
    flag("--grpc-port", type=int, default=8001, help="gRPC port (0: any free port)")
    flag(
        "--grpc-infer-response-compression-level",
        choices=("none", "low", "medium", "high"),
        default="none",
        help="compression of infer responses",
    )
    flag(
        "--grpc-max-message-size",
        type=int,
        default=MAX_GRPC_MESSAGE_BYTES,
        metavar="BYTES",
        help="largest gRPC message sent or received (workbench only; Triton uses INT32_MAX)",
    )
    flag(
        "--grpc-implementation",
        choices=IMPLEMENTATIONS,
        default="auto",
        help="the server that carries gRPC calls: gRPC's C++ server (native, when built), "
        "grpcio's Python one, or native where built (auto; workbench only)",
    )
    _add_grpc_keepalive(flag)


def _add_grpc_keepalive(flag: Callable[..., object]) -> None:
    """tritonserver's gRPC keepalive and connection-age flags, its defaults, milliseconds."""
    keepalive = GrpcKeepalive()
    flag(
        "--grpc-keepalive-time",
        type=int,
        default=keepalive.keepalive_time_ms,
        metavar="MS",
        help="send a keepalive ping on a connection this long without activity",
    )
    flag(
        "--grpc-keepalive-timeout",
        type=int,
        default=keepalive.keepalive_timeout_ms,
        metavar="MS",
        help="close the connection when a keepalive ping is not answered within this",
    )
    flag(
        "--grpc-keepalive-permit-without-calls",
        type=_bool,
        nargs="?",
        const=True,
        default=keepalive.keepalive_permit_without_calls,
        help="keepalive pings also while no call is in flight",
    )
    flag(
        "--grpc-http2-max-pings-without-data",
        type=int,
        default=keepalive.http2_max_pings_without_data,
        help="pings sent without data in between (0: no limit)",
    )
    flag(
        "--grpc-http2-min-recv-ping-interval-without-data",
        type=int,
        default=keepalive.http2_min_recv_ping_interval_without_data_ms,
        metavar="MS",
        help="a client ping sooner than this after the last one, without data, is a ping strike",
    )
    flag(
        "--grpc-http2-max-ping-strikes",
        type=int,
        default=keepalive.http2_max_ping_strikes,
        help="ping strikes before the connection is closed with GOAWAY (0: no limit)",
    )
    flag(
        "--grpc-max-connection-age",
        type=int,
        default=keepalive.max_connection_age_ms,
        metavar="MS",
        help="close a connection (GOAWAY) once it is this old, so clients reconnect (0: never)",
    )
    flag(
        "--grpc-max-connection-age-grace",
        type=int,
        default=keepalive.max_connection_age_grace_ms,
        metavar="MS",
        help="time calls in flight get after --grpc-max-connection-age (0: unbounded)",
    )


def _add_http_limits(flag: Callable[..., object]) -> None:
    flag(
        "--http-idle-timeout-secs",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT_S,
        help="close an HTTP keep-alive connection with no request for this long; requests "
        "executing or streaming are never cut; 0: never (tritonserver's behaviour)",
    )
    flag(
        "--http-header-timeout-secs",
        type=float,
        default=DEFAULT_HEADER_TIMEOUT_S,
        help="close (408) a connection whose request line and headers have not all arrived "
        "this long after they began; 0: never",
    )
    flag(
        "--http-max-header-size",
        type=int,
        default=DEFAULT_MAX_HEADER_BYTES,
        metavar="BYTES",
        help="refuse (431) a request whose URL and header fields are larger",
    )


def _add_access(flag: Callable[..., object]) -> None:
    flag(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="<api>[,<api>...]:<key>=<value>",
        help="HTTP API groups answered only to requests with header <key>: <value> "
        "(repeatable; groups: " + ", ".join(CATEGORIES) + ")",
    )
    flag(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="<protocol>[,<protocol>...]:<key>=<value>",
        help="gRPC protocol groups answered only to calls with metadata "
        "triton-grpc-protocol-<key>: <value> (repeatable)",
    )
    flag(
        "--allow-model-upload",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="whether a load request may carry model files ('file:' parameters); "
        "false keeps load/unload from the repository only (workbench only)",
    )


def _add_metrics(flag: Callable[..., object]) -> None:
    flag(
        "--allow-metrics",
        type=_bool,
        nargs="?",
        const=True,
        default=True,
        help="serve Prometheus metrics",
    )
    flag("--allow-cpu-metrics", type=_bool, nargs="?", const=True, default=True, help="CPU use")
    flag("--allow-gpu-metrics", type=_bool, nargs="?", const=True, default=True, help="NVML")
    flag("--metrics-address", default=None, help="None: the same as --http-address")
    flag("--metrics-port", type=int, default=8002, help="metrics port (0: any free port)")
    flag("--metrics-interval-ms", type=float, default=2000.0, help="how often gauges update")
    flag(
        "--metrics-config",
        action="append",
        default=[],
        metavar="<setting>=<value>",
        help="e.g. summary_latencies=true (repeatable)",
    )


def _add_cache_and_rate_limit(flag: Callable[..., object]) -> None:
    flag(
        "--cache-config",
        action="append",
        default=[],
        metavar="<cache>,<setting>=<value>",
        help="response cache settings, e.g. local,size=1048576 (repeatable)",
    )
    flag(
        "--response-cache-byte-size",
        default=None,
        metavar="BYTES",
        help="deprecated alias of --cache-config local,size=BYTES",
    )
    flag("--rate-limit", default="off", help="off or execution_count")
    flag(
        "--rate-limit-resource",
        action="append",
        default=[],
        metavar="<name>:<count>[:<device>]",
        help="resources available to the rate limiter (repeatable)",
    )


def serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.DEBUG if args.log_verbose > 0 else logging.INFO,
        format="%(asctime)s %(levelname).1s %(name)s] %(message)s",
    )
    if server_from_args(args).serve_forever():
        return 0
    # tritonserver's words and status when its exit timeout expires
    logging.getLogger("workbench.server").error(
        "failed to stop server: Internal - Exit timeout expired. Exiting immediately."
    )
    return 1


def server_from_args(args: argparse.Namespace) -> Server:
    """The ``Server`` that ``workbench serve`` runs for these parsed flags."""
    return Server(args.model_repository, ServerOptions.from_flags(args))
