"""Who can reach the server: loopback by default, restricted groups, and the exposure warning."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import grpc
import pytest
import requests
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench.cli import build_parser, main
from workbench.errors import InvalidArgumentError
from workbench.server.cli import server_from_args
from workbench.server.hosting import Server
from workbench.server.restricted import (
    Restriction,
    exposure_warning,
    grpc_restrictions,
    http_restrictions,
    is_loopback,
)


def test_serve_listens_on_loopback_unless_asked(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}"])
    options = server_from_args(args).options
    assert options.grpc is not None and options.metrics is not None
    assert (options.host, options.grpc.address, options.metrics.address) == ("127.0.0.1",) * 3
    opened = build_parser().parse_args(
        ["serve", f"--model-repository={tmp_path}", "--http-address=0.0.0.0"]
    )
    options = server_from_args(opened).options
    assert options.metrics is not None and options.grpc is not None
    # metrics follow --http-address (as in tritonserver); gRPC keeps its own default
    assert (options.host, options.metrics.address, options.grpc.address) == (
        "0.0.0.0",
        "0.0.0.0",
        "127.0.0.1",
    )


def test_server_host_opens_every_endpoint_unless_each_is_named(tmp_path: Path) -> None:
    # Server(host=...) is the server's one address (README, Security), unlike the CLI's
    # --http-address: a notebook that opens the server opens gRPC too, unless it says not to
    opened = Server(tmp_path, host="0.0.0.0").options
    assert opened.grpc is not None and opened.metrics is not None
    assert (opened.host, opened.grpc.address, opened.metrics.address) == ("0.0.0.0",) * 3
    named = Server(tmp_path, host="0.0.0.0", grpc_address="127.0.0.1").options
    assert named.grpc is not None and named.grpc.address == "127.0.0.1"
    assert Server(tmp_path, host="0.0.0.0", allow_grpc=False).options.grpc is None


def test_a_started_server_binds_every_endpoint_to_loopback(tmp_path: Path) -> None:
    with Server(tmp_path, http_port=0, grpc_port=0, metrics_port=0) as server:
        addresses = {server.url, f"http://{server.grpc_url}", server.metrics_url}
        assert all(url.startswith("http://127.0.0.1:") for url in addresses), addresses
        bound = server._socket.getsockname()[0] if server._socket else None  # noqa: SLF001
        assert bound == "127.0.0.1"
        # nothing answers on another address of this machine's for the same port
        other = _non_loopback_address()
        if other is not None:
            with pytest.raises(OSError):
                socket.create_connection((other, server.http_port), timeout=2).close()


def _non_loopback_address() -> str | None:
    """This machine's address on its default route, if it has one (nothing is sent)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: connect() on UDP only picks a route
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if is_loopback(address) else address


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["foo:k=v"], "unknown restricted api 'foo'"),
        (["health,,statistics:k=v"], "unknown restricted api ''"),
        (["health,health:k=v"], "restricted api 'health' can not be specified in multiple"),
        (["health:k=v", "statistics,health:x=y"], "restricted api 'health' can not be specified"),
        (["health"], "--http-restricted-api option format is '<config name>:<setting>=<value>'"),
        (["health:k"], "option format is '<config name>:<setting>=<value>'. Got health:k"),
        ([":k=v"], "Got :k=v"),
        (["health:=v"], "Got health:=v"),
        (["health:k="], "Got health:k="),
    ],
)
def test_http_flags_are_refused_with_tritons_messages(flags: list[str], message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        http_restrictions(flags)
    assert message in str(raised.value)


def test_flag_values_as_triton_cuts_them() -> None:
    assert http_restrictions("health:k=v=w") == {"health": Restriction("k", "v=w")}
    assert grpc_restrictions(["model-repository,trace:Key=s"]) == {
        "model-repository": Restriction("triton-grpc-protocol-Key", "s"),
        "trace": Restriction("triton-grpc-protocol-Key", "s"),
    }
    with pytest.raises(InvalidArgumentError, match="unknown restricted protocol 'bar'"):
        grpc_restrictions(["bar:k=v"])


def test_a_bad_flag_stops_the_command_with_its_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", f"--model-repository={tmp_path}", "--grpc-restricted-protocol=bar:k=v"]
    assert main(argv) == 1
    assert "unknown restricted protocol 'bar'" in capsys.readouterr().err


def test_restricted_health_needs_its_header_on_both_protocols(tmp_path: Path) -> None:
    with Server(
        tmp_path,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        http_restricted_api="health:probe=ok",
        grpc_restricted_protocol=["health:probe=ok"],
    ) as server:
        refused = requests.get(f"{server.url}/v2/health/ready", timeout=10)
        assert refused.status_code == 403
        assert refused.json() == {"error": "This API is restricted, expecting header 'probe'"}
        assert refused.headers["content-type"] == "text/plain"  # evhtp's default, as Triton's
        opened = requests.get(f"{server.url}/v2/health/ready", headers={"Probe": "ok"}, timeout=10)
        assert opened.status_code == 200
        ready = requests.get(f"{server.url}/v2/models/x/ready", timeout=10)
        assert ready.status_code == 403
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as raised:
                stub.ServerLive(pb.ServerLiveRequest(), timeout=10)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            # tritonserver 2.51's words (tests/security/test_restricted_api.py compares them)
            assert raised.value.details() == (
                "This protocol is restricted, expecting header 'triton-grpc-protocol-probe'"
            )
            live = stub.ServerLive(
                pb.ServerLiveRequest(), metadata=[("triton-grpc-protocol-probe", "ok")], timeout=10
            )
            assert live.live
            # other groups stay open
            assert stub.ServerMetadata(pb.ServerMetadataRequest(), timeout=10).name == "triton"


def test_an_open_address_with_an_open_repository_api_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(
        tmp_path, host="0.0.0.0", grpc_address="127.0.0.1", model_control_mode="explicit"
    )
    with caplog.at_level(logging.WARNING, logger="workbench.server"):
        server._warn_if_exposed()  # noqa: SLF001 - what start() and serve_forever() log
    warnings = [r.getMessage() for r in caplog.records]
    assert any(w.startswith("HTTP listens on 0.0.0.0") and "'file:'" in w for w in warnings)
    assert not any(w.startswith("gRPC") for w in warnings)  # gRPC stayed on loopback

    caplog.clear()
    guarded = Server(
        tmp_path,
        host="0.0.0.0",
        grpc_address="::",
        model_control_mode="explicit",
        http_restricted_api=["model-repository:k=v"],
        allow_model_upload=False,
    )
    with caplog.at_level(logging.WARNING, logger="workbench.server"):
        guarded._warn_if_exposed()  # noqa: SLF001
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "gRPC listens on :: and its model-repository API is unrestricted: anyone who can reach "
        "it can load and unload models; restrict it with "
        "--grpc-restricted-protocol=model-repository:<header>=<secret>"
    ]


def test_loopback_addresses_and_warnings() -> None:
    assert all(is_loopback(a) for a in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(a) for a in ("0.0.0.0", "::", "10.0.0.1", "example.org"))
    assert exposure_warning("HTTP", "127.0.0.1", {}, True, True) is None
    restricted = {"model-repository": Restriction("k", "v")}
    assert exposure_warning("HTTP", "0.0.0.0", restricted, True, True) is None
    listed = exposure_warning("HTTP", "0.0.0.0", {}, False, True)
    assert listed is not None and "list the repository's models" in listed


def test_http_connection_limits_reach_the_front_end(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            f"--model-repository={tmp_path}",
            "--http-idle-timeout-secs=0.3",
            "--http-header-timeout-secs=0",
            "--http-max-header-size=2048",
        ]
    )
    server = server_from_args(args)
    limits = server.options.http_limits
    assert (limits.idle_timeout_s, limits.header_timeout_s, limits.max_header_bytes) == (
        0.3,
        0,
        2048,
    )
    with pytest.raises(InvalidArgumentError, match="max_header_bytes must be > 0"):
        Server(tmp_path, http_max_header_size=0)
    with server:
        idle = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
        with idle:
            idle.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert idle.recv(4096).startswith(b"HTTP/1.1 200")
            assert idle.recv(4096) == b""  # closed by the server once idle for 0.3 s
        big = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
        with big:
            big.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 4096 + b"\r\n\r\n")
            assert big.recv(4096).startswith(b"HTTP/1.1 431")
