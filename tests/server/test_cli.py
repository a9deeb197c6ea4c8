"""``workbench serve`` in a subprocess: tritonserver flags, readiness, SIGTERM drains."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
import requests
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.core.conftest import write_add_model
from workbench import __version__
from workbench.cli import build_parser, main
from workbench.errors import InvalidArgumentError
from workbench.server.cli import server_from_args
from workbench.server.grpc import native
from workbench.server.grpc.frontend import GrpcKeepalive
from workbench.server.hosting import Server
from workbench.server.options import cache_size, rate_limit_resources

pytestmark = pytest.mark.integration


def test_parser_takes_tritonserver_flag_names() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model-repository=/m",
            "--http-port",
            "9000",
            "--model-control-mode=explicit",
            "--load-model",
            "a",
            "--load-model=b",
            "--repository-poll-secs=5",
            "--strict-model-config=false",
            "--log-verbose=1",
            "--exit-timeout-secs=3",
            "--http-address=127.0.0.1",
        ]
    )
    assert args.model_repository == ["/m"] and args.http_port == 9000
    assert args.load_model == ["a", "b"] and args.model_control_mode == "explicit"
    assert args.strict_model_config is False and args.exit_timeout_secs == 3.0


def test_cache_and_rate_limit_flags_take_tritonserver_spellings() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model-repository=/m",
            "--cache-config",
            "local,size=1048576",
            "--rate-limit=execution_count",
            "--rate-limit-resource=R1:4",
            "--rate-limit-resource",
            "R2:2:0",
        ]
    )
    assert cache_size(args.cache_config, args.response_cache_byte_size) == 1048576
    assert args.rate_limit == "execution_count"
    assert rate_limit_resources(args.rate_limit_resource) == {"R1": 4, "R2": 2}
    equals = build_parser().parse_args(
        ["serve", "--model-repository=/m", "--cache-config=local,size=8"]
    )
    assert cache_size(equals.cache_config, None) == 8
    legacy = build_parser().parse_args(
        ["serve", "--model-repository=/m", "--response-cache-byte-size", "4096"]
    )
    assert cache_size(legacy.cache_config, legacy.response_cache_byte_size) == 4096
    assert cache_size([], None) == 0


@pytest.mark.parametrize(
    ("flags", "legacy", "message"),
    [
        (
            ["local,size=10"],
            "10",
            "Incompatible flags --response-cache-byte-size and --cache-config",
        ),
        (["size=10"], None, "No cache specified. --cache-config option format is"),
        (["local,size"], None, "--cache-config option format is '<cache name>,<setting>=<value>'"),
        (["local,size="], None, "Got local,size="),
        (["redis,host=localhost"], None, "only the 'local' cache is supported"),
        (["local,other=1"], None, "didn't contain a valid 'size' field"),
        (["local,size=1MB"], None, "invalid size '1MB'"),
        ([], "-5", "invalid size '-5'"),
    ],
)
def test_bad_cache_config_is_a_clear_error(
    flags: list[str], legacy: str | None, message: str
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        cache_size(flags, legacy)
    assert message in str(caught.value)


def test_rate_limit_resources_merge_devices_and_reject_bad_specs() -> None:
    assert rate_limit_resources(["R:2:0", "R:5:1", "G:1"]) == {"R": 5, "G": 1}
    for bad in ("R", "R:x", ":2", "R:2:0:1", "R:2:gpu", "R:-1"):
        with pytest.raises(InvalidArgumentError, match="rate-limit-resource"):
            rate_limit_resources([bad])


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--rate-limit=sometimes", "invalid argument for --rate-limit: 'sometimes'"),
        ("--cache-config=local,size=big", "invalid size 'big'"),
        ("--rate-limit-resource=R", "--rate-limit-resource option format is"),
    ],
)
def test_invalid_values_exit_1_with_the_message(
    flag: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", f"--model-repository={tmp_path}", "--http-port=0", flag]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ") and message in error


def test_server_keywords_fill_core_options(tmp_path: Path) -> None:
    server = Server(
        tmp_path,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        cache_size=1 << 20,
        rate_limit="EXECUTION_COUNT",
        rate_limit_resources={"R1": 2},
    )
    core = server.options.core
    assert core.cache_size == 1 << 20 and core.rate_limit == "execution_count"
    assert dict(core.rate_limit_resources) == {"R1": 2}
    defaults = Server(tmp_path, http_port=0, grpc_port=0, metrics_port=0).options.core
    assert (defaults.cache_size, defaults.rate_limit, dict(defaults.rate_limit_resources)) == (
        0,
        "off",
        {},
    )
    for bad in (
        {"cache_size": -1},
        {"rate_limit": "fast"},
        {"rate_limit_resources": {"R": -2}},
        {"rate_limit_resources": {"": 1}},
    ):
        with pytest.raises(InvalidArgumentError):
            Server(tmp_path, http_port=0, grpc_port=0, metrics_port=0, **bad)  # type: ignore[arg-type]


def _start(repo: Path) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable,
        "-m",
        "workbench",
        "serve",
        f"--model-repository={repo}",
        "--http-port=0",
        "--grpc-port=0",
        "--metrics-port=0",
        "--http-address=127.0.0.1",
        "--exit-timeout-secs=10",
    ]
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    for line in process.stderr:
        found = re.search(r"Started HTTPService at 127\.0\.0\.1:(\d+)", line)
        if found:
            return process, f"http://127.0.0.1:{found.group(1)}"
        assert time.monotonic() < deadline
    raise AssertionError(f"server exited with {process.wait()}")


def test_serve_then_sigterm_drains_in_flight_requests(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_model(repo, "slow", sleep=1.0)
    process, url = _start(repo)
    try:
        assert requests.get(f"{url}/v2/health/ready", timeout=5).status_code == 200
        body = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}
            ]
        }
        replies: list[requests.Response] = []
        worker = threading.Thread(
            target=lambda: replies.append(
                requests.post(f"{url}/v2/models/slow/infer", data=json.dumps(body), timeout=30)
            )
        )
        worker.start()
        time.sleep(0.3)  # the request is now executing inside the model
        process.send_signal(signal.SIGTERM)
        worker.join(30)
        assert replies and replies[0].status_code == 200, replies
        assert replies[0].json()["outputs"][0]["data"] == [1, 1, 1, 1]
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        assert process.stderr is not None
        process.stderr.close()


STARTED = re.compile(r"Started (HTTPService|GRPCInferenceService|Metrics Service) at (\S+):(\d+)")


def test_serve_without_address_flags_listens_on_loopback_only(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_model(repo, "add")
    command = [sys.executable, "-m", "workbench", "serve", f"--model-repository={repo}"]
    command += ["--http-port=0", "--grpc-port=0", "--metrics-port=0"]  # ports, no addresses
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    assert process.stderr is not None
    started: dict[str, tuple[str, int]] = {}
    try:
        for line in process.stderr:  # HTTP starts last
            if found := STARTED.search(line):
                started[found[1]] = (found[2], int(found[3]))
            if "HTTPService" in started:
                break
        assert set(started) == {"HTTPService", "GRPCInferenceService", "Metrics Service"}
        assert {address for address, _ in started.values()} == {"127.0.0.1"}, started
        sockets = psutil.Process(process.pid).net_connections(kind="inet")
        listening = {
            (_ipv4(c.laddr.ip), c.laddr.port) for c in sockets if c.status == psutil.CONN_LISTEN
        }
        assert listening == set(started.values())  # the three, each on loopback only
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
            process.stderr.close()


def _ipv4(address: str) -> str:
    """gRPC listens on an IPv6 socket bound to the v4-mapped address (``::ffff:127.0.0.1``):
    the same loopback address, reachable from nowhere else."""
    ip = ipaddress.ip_address(address)
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return str(mapped or ip)


def test_a_busy_grpc_port_is_one_error_line_and_exit_status_1(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        command = [sys.executable, "-m", "workbench", "serve", f"--model-repository={tmp_path}"]
        command += ["--http-port=0", f"--grpc-port={port}", "--metrics-port=0"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    # ours, before anything starts: no grpc core log line ("E1125 ... Failed to add port")
    assert result.returncode == 1
    assert result.stderr == f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_grpc_and_metrics_flags_reach_the_server(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            f"--model-repository={tmp_path}",
            "--http-address=127.0.0.1",
            "--grpc-port=9101",
            "--grpc-infer-response-compression-level=high",
            "--grpc-max-message-size=1048576",
            "--metrics-port=9102",
            "--metrics-interval-ms=500",
            "--allow-gpu-metrics=false",
            "--metrics-config=summary_latencies=true",
        ]
    )
    options = server_from_args(args).options
    assert options.grpc is not None and options.metrics is not None
    # loopback unless asked (Triton's default is 0.0.0.0: issue #12)
    assert (options.grpc.port, options.grpc.address) == (9101, "127.0.0.1")
    assert (options.grpc.infer_compression, options.grpc.max_message_bytes) == ("high", 1 << 20)
    # --metrics-address defaults to --http-address, as in tritonserver
    assert (options.metrics.port, options.metrics.address) == (9102, "127.0.0.1")
    assert (options.metrics.interval_ms, options.metrics.allow_gpu) == (500, False)
    assert options.metrics.allow_cpu and options.metrics.config["summary_latencies"] == "true"
    off = build_parser().parse_args(
        ["serve", f"--model-repository={tmp_path}", "--allow-grpc=false", "--allow-metrics=0"]
    )
    assert server_from_args(off).options.grpc is None
    assert server_from_args(off).options.metrics is None


KEEPALIVE_FLAGS = [
    "--grpc-keepalive-time=60000",
    "--grpc-keepalive-timeout=5000",
    "--grpc-keepalive-permit-without-calls=1",
    "--grpc-http2-max-pings-without-data=0",
    "--grpc-http2-min-recv-ping-interval-without-data=10000",
    "--grpc-http2-max-ping-strikes=3",
    "--grpc-max-connection-age=300",
    "--grpc-max-connection-age-grace=200",
]


def test_grpc_keepalive_flags_take_tritons_names_and_defaults(tmp_path: Path) -> None:
    plain = build_parser().parse_args(["serve", f"--model-repository={tmp_path}"])
    options = server_from_args(plain).options.grpc
    assert options is not None
    # tritonserver 2.51's KeepAliveOptions (server src/grpc/grpc_server.h)
    assert options.keepalive == GrpcKeepalive(7_200_000, 20_000, False, 2, 300_000, 2, 0, 0)
    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}", *KEEPALIVE_FLAGS])
    options = server_from_args(args).options.grpc
    assert options is not None
    assert options.keepalive == GrpcKeepalive(60_000, 5_000, True, 0, 10_000, 3, 300, 200)
    with pytest.raises(InvalidArgumentError, match="--grpc-max-connection-age: -1"):
        Server(tmp_path, grpc_max_connection_age=-1)


def test_grpc_keepalive_flags_reach_the_grpc_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The channel arguments given to whichever gRPC server runs: grpcio's or the native one.
    created: list[dict[str, int]] = []
    create = grpc.aio.server
    start = native.NativeServer.start

    def recording(*args: Any, **keywords: Any) -> Any:
        created.append(dict(keywords["options"]))
        return create(*args, **keywords)

    def recording_start(self: Any, target: str, arguments: Any) -> int:
        created.append(dict(arguments))
        return start(self, target, arguments)

    monkeypatch.setattr(grpc.aio, "server", recording)
    monkeypatch.setattr(native.NativeServer, "start", recording_start)
    flags = ["--http-port=0", "--grpc-port=0", "--metrics-port=0", *KEEPALIVE_FLAGS]
    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}", *flags])
    with server_from_args(args) as server:
        [arguments] = created
        assert {name: arguments[name] for name in arguments if "keepalive" in name} == {
            "grpc.keepalive_time_ms": 60_000,
            "grpc.keepalive_timeout_ms": 5_000,
            "grpc.keepalive_permit_without_calls": 1,
        }
        assert arguments["grpc.http2.max_pings_without_data"] == 0
        assert arguments["grpc.http2.min_ping_interval_without_data_ms"] == 10_000
        assert arguments["grpc.http2.max_ping_strikes"] == 3
        assert arguments["grpc.max_connection_age_ms"] == 300
        assert arguments["grpc.max_connection_age_grace_ms"] == 200
        # and gRPC acts on them: past its age the connection is closed (GOAWAY), so the
        # channel leaves READY; without the option it stays READY (the wait is a guard)
        states: list[grpc.ChannelConnectivity] = []
        with grpc.insecure_channel(server.grpc_url) as channel:
            channel.subscribe(states.append)
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live
            ready, deadline = grpc.ChannelConnectivity.READY, time.monotonic() + 30
            while ready not in states or states[-1] == ready:
                assert time.monotonic() < deadline, states
                time.sleep(0.05)


def test_version_and_help_show_what_a_new_user_needs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as version:
        build_parser().parse_args(["--version"])
    assert version.value.code == 0
    assert capsys.readouterr().out.strip() == f"workbench {__version__}"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for default in (
        "(default: 8000)",
        "(default: 8001)",
        "(default: 8002)",
        "(default: 127.0.0.1)",
        "{none,explicit,poll} none: load everything at start",
        "(default: none)",
    ):
        assert default in text, default


def test_grpc_implementation_flag_and_keyword(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}"])
    options = server_from_args(args).options.grpc
    assert options is not None and options.implementation == "auto"
    flag = "--grpc-implementation=grpcio"
    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}", flag])
    options = server_from_args(args).options.grpc
    assert options is not None and options.implementation == "grpcio"
    keyword = Server(tmp_path, grpc_implementation="native").options.grpc
    assert keyword is not None and keyword.implementation == "native"
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            ["serve", f"--model-repository={tmp_path}", "--grpc-implementation=x"]
        )


def test_serve_logs_which_grpc_server_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="workbench.server")
    with Server(tmp_path, http_port=0, grpc_port=0, metrics_port=0, grpc_implementation="grpcio"):
        pass
    started = [r.getMessage() for r in caplog.records if "GRPCInferenceService" in r.getMessage()]
    assert started and started[0].endswith("(grpcio)"), started
