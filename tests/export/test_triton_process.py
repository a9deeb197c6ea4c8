"""Picking tritonserver's ports: three different ones, and a clash worth new ones."""

from __future__ import annotations

from workbench.export.triton_process import _free_ports, _port_clash


def test_fresh_ports_are_all_different() -> None:
    # One at a time the system handed out the same port twice (tritonserver then refused it
    # for both HTTP and gRPC); bound together they cannot coincide.
    for _ in range(50):
        ports = _free_ports("127.0.0.1", 3)
        assert len(set(ports)) == 3 and 0 not in ports


def test_a_port_clash_is_recognised_in_tritons_log() -> None:
    assert _port_clash("failed to start HTTP service: Address already in use")
    assert _port_clash(
        "The server cannot listen to HTTP requests and GRPC requests at the same address and "
        "port 127.0.0.1:44741"
    )
    assert not _port_clash("failed to load 'add_one'")
