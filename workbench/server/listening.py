"""Listening sockets, bound before the server starts so that a busy port is the caller's error."""

from __future__ import annotations

import socket

from workbench.errors import UnavailableError


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind the listening socket now so that errors reach the caller; port 0 = ephemeral."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UnavailableError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


__all__ = ["bind_socket"]
