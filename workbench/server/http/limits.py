"""How long and how large a client may be before the HTTP front end hangs up on it.

Real Triton 2.51 sets none of these: ``HTTPServer::Start`` (``src/http_server.cc``) never calls
``evhtp_set_timeouts``, so libevhtp arms no read timeout and an idle keep-alive connection, or
one that sends half a request line and stops, holds its file descriptor until the client
leaves. libevhtp's parser bounds each token instead (``PARSER_STACK_MAX``: the URL, each header
name and each value up to 8 KiB) and on any parse error frees the connection without a reply.
Measured on tritonserver 2.51 here: a 9,000-byte header value or URL gets the connection
closed with no reply, 500 headers of 4,000 bytes (2 MB) are served, and a connection that sent
nothing, or half a request line, is still open 8 s later. We keep Triton's wire behaviour for
well-behaved clients and add the limits a public server needs (issue #12, "secure by
default"), with defaults taken from nginx, the server most deployments put in front of Triton:

- ``idle_timeout_s`` 75 s: nginx's ``keepalive_timeout``. Long enough that pooled clients
  (tritonclient's geventhttpclient pool, perf_analyzer's curl handles) rarely see a connection
  closed under them between two requests of a run; short enough that abandoned connections
  give their descriptors back within a minute or two.
- ``header_timeout_s`` 60 s: nginx's ``client_header_timeout``, counted from the first byte of
  a request (from the accept for a new connection). A slowloris client that drips its head
  byte by byte is gone after this, answered 408 when it had sent something.
- ``max_header_bytes`` 64 KiB: the request target and header fields together. evhtp's 8 KiB
  per token allows any one token a client may legitimately send (a long token in
  ``Authorization``, a ``traceparent``); 64 KiB leaves room for eight such tokens while bounding
  what one connection can make us buffer before its head ends (Triton itself takes megabytes of
  headers in 8 KiB pieces). Over the limit the answer is 431 "Request Header Fields Too Large"
  and the connection closes: RFC 6585 made 431 for exactly this, where 400 would tell the
  client its syntax is wrong and evhtp's silent close tells it nothing.

A timeout of 0 turns that timeout off (Triton's own behaviour). No timeout applies while a
request's body is arriving, while requests are queued or executing, or while a reply streams
(``generate_stream``): those are the server's work, not an idle client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_IDLE_TIMEOUT_S = 75.0
DEFAULT_HEADER_TIMEOUT_S = 60.0
DEFAULT_MAX_HEADER_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The limits every connection of one front end applies (see the module docstring)."""

    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES

    def __post_init__(self) -> None:
        for name in ("idle_timeout_s", "header_timeout_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: no timeout)")
        if self.max_header_bytes <= 0:
            raise ValueError("max_header_bytes must be > 0")

    @property
    def idle_s(self) -> float:
        """The idle timeout as a delay (infinite when turned off)."""
        return self.idle_timeout_s or math.inf

    @property
    def header_s(self) -> float:
        """The header timeout as a delay (infinite when turned off)."""
        return self.header_timeout_s or math.inf


DEFAULT_LIMITS = HttpLimits()

__all__ = [
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_IDLE_TIMEOUT_S",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_HEADER_BYTES",
    "HttpLimits",
]
