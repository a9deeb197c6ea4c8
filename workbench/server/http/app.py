"""Triton's HTTP/REST protocol: ``HttpApp.handle`` turns one whole request into its reply.

The serving port calls ``handle`` straight from its own connection (``connection.py``); the
app is also a plain ASGI application (``__call__``) that any ASGI server can mount.
Routing mirrors ``HTTPAPIServer::Handle`` in Triton 2.51 (the same regular expressions in the
same order), so paths, 404 and 405 answers match Triton's. No framework sits on the infer path
(a FastAPI route there costs ~25% of throughput, see docs/architecture.md), and no request can
take the server down: every exception becomes an
``{"error": ...}`` reply with the status of its category. Generate replies are the one kind sent
in chunks as the model's responses arrive (``generate.py``).
"""

from __future__ import annotations

import functools
import re
import time

from workbench.core.contract import ServingCore
from workbench.core.trace_settings import TraceManager
from workbench.errors import InvalidArgumentError
from workbench.server.http.endpoints import DEFAULT_EXTENSIONS, Endpoints
from workbench.server.http.generate import GenerateEndpoint
from workbench.server.http.inference import InferEndpoint
from workbench.server.http.messages import (
    NOT_FOUND,
    HttpRequest,
    Receive,
    Reply,
    Scope,
    Send,
    StreamedReply,
    error_reply,
    error_text_reply,
    send_reply,
)
from workbench.server.http.tracing import http_sent
from workbench.server.log_settings import LogSettings
from workbench.server.restricted import Restrictions
from workbench.server.shared_memory import SharedMemoryRegistry

#: Triton's ``--http-max-input-size`` default (64 MiB).
DEFAULT_MAX_INPUT_BYTES = 1 << 26

_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_SERVER = re.compile(r"/v2(?:/health/(live|ready))?")
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_SHARED_MEMORY = re.compile(
    r"/v2/(system|cuda)sharedmemory(?:/region/([^/]+))?/(status|register|unregister)"
)


#: paths up to this long have their model route remembered (clients repeat the same few)
_CACHED_PATH_CHARS = 512


def model_route(path: str) -> tuple[str, str, str] | None:
    """(model, version, kind) of a ``/v2/models/...`` path; ``None`` for any other path."""
    if len(path) <= _CACHED_PATH_CHARS:
        return _cached_model_route(path)
    return _match_model_route(path)


def _match_model_route(path: str) -> tuple[str, str, str] | None:
    match = _MODEL.fullmatch(path)
    return None if match is None else (match[1], match[2] or "", match[3] or "")


_cached_model_route = functools.lru_cache(maxsize=256)(_match_model_route)


class _Disconnected(Exception):
    """The client went away before its request body arrived."""


class HttpApp:
    """Triton's HTTP/REST protocol from an ``InferenceCore``: ``handle`` for the server's own
    connections, ``__call__`` for any ASGI server."""

    def __init__(
        self,
        core: ServingCore,
        *,
        max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
        extensions: tuple[str, ...] = DEFAULT_EXTENSIONS,
        log_settings: LogSettings | None = None,
        restrictions: Restrictions | None = None,
        shared_memory: SharedMemoryRegistry | None = None,
        tracer: TraceManager | None = None,
    ) -> None:
        self.core = core
        #: the trace settings (the server's, which gRPC shares); requests are sampled under them
        self.tracer = tracer if tracer is not None else TraceManager()
        #: the registered shared-memory regions (the server's, which gRPC shares)
        self.shared_memory = shared_memory if shared_memory is not None else SharedMemoryRegistry()
        #: ``--http-restricted-api``: group -> the header its requests must carry
        self.restrictions = dict(restrictions or {})
        self.max_input_bytes = max_input_bytes
        self.log_settings = log_settings or LogSettings()
        self.infer = InferEndpoint(core, max_input_bytes, self.shared_memory, self.tracer)
        self.generate = GenerateEndpoint(core, self.tracer)
        self.endpoints = Endpoints(
            core, extensions, self.log_settings, self.shared_memory, self.tracer
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            body = await self._read_body(scope, receive)
        except _Disconnected:
            return
        except InvalidArgumentError as exc:
            await send_reply(send, error_reply(exc))
            return
        request = HttpRequest(scope["method"], scope["path"], scope["headers"], body)
        reply = await self.handle(request)
        if isinstance(reply, Reply):
            started = time.monotonic_ns() if reply.trace is not None else 0
            await send_reply(send, reply)
            if reply.trace is not None:
                http_sent(reply.trace, started)
        else:
            await reply.respond(send, receive)  # generate: chunked, as responses arrive

    async def handle(self, request: HttpRequest) -> Reply | StreamedReply:
        """The reply to one whole request; every failure becomes an ``{"error": ...}`` reply."""
        if request.refusal is not None:
            return error_reply(request.refusal)
        try:
            return await self.dispatch(request)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error reply
            return error_reply(exc)

    def refuse_length(self, size: int) -> InvalidArgumentError | None:
        """The error for a body of ``size`` bytes, or None when it is within the limit."""
        return _too_large(size, self.max_input_bytes) if size > self.max_input_bytes else None

    async def dispatch(self, req: HttpRequest) -> Reply | StreamedReply:
        """Route one request the way Triton's ``HTTPAPIServer::Handle`` does."""
        path = req.path
        if path == "/v2/models/stats":
            return self._refusal(req, "statistics") or await self.endpoints.model_stats(req)
        if path == "/v2/logging":
            return self._refusal(req, "logging") or await self.endpoints.logging(req)
        route = model_route(path)
        if route is not None:
            model, version, kind = route
            if kind == "infer":
                return self._refusal(req, "inference") or await self.infer(req, model, version)
            reply = await self._model_route(req, model, version, kind)
            if reply is not None:
                return reply
        return await self._server_route(req, path)

    def _refusal(self, req: HttpRequest, group: str) -> Reply | None:
        """403 when ``group`` is restricted and the request lacks its header (Triton's check)."""
        restriction = self.restrictions.get(group)
        if restriction is None or restriction.allows(req.header(restriction.lookup)):
            return None
        return error_text_reply(403, restriction.http_refusal)

    async def _model_route(
        self, req: HttpRequest, model: str, version: str, kind: str
    ) -> Reply | StreamedReply | None:
        if kind == "":
            return self._refusal(req, "metadata") or await self.endpoints.model_metadata(
                req, model, version
            )
        if kind == "ready":
            return self._refusal(req, "health") or await self.endpoints.model_ready(
                req, model, version
            )
        if kind == "config":
            return self._refusal(req, "model-config") or await self.endpoints.model_config(
                req, model, version
            )
        if kind == "stats":
            return self._refusal(req, "statistics") or await self.endpoints.model_stats(
                req, model, version
            )
        if kind.startswith("generate"):
            return self._refusal(req, "inference") or await self.generate(
                req, model, version, kind == "generate_stream"
            )
        # trace/setting: only without a version, else Triton falls through to "Not Found"
        if version:
            return None
        return self._refusal(req, "trace") or await self.endpoints.trace(req, model)

    async def _server_route(self, req: HttpRequest, path: str) -> Reply:
        if path == "/v2":
            return self._refusal(req, "metadata") or await self.endpoints.server_metadata(req)
        if (match := _SERVER.fullmatch(path)) is not None:
            return self._refusal(req, "health") or await self.endpoints.health(req, match[1])
        if (match := _SHARED_MEMORY.fullmatch(path)) is not None:
            return self._refusal(req, "shared-memory") or await self.endpoints.shared_memory(
                req, match[1], match[2] or "", match[3]
            )
        if (match := _REPOSITORY.fullmatch(path)) is not None:
            return self._refusal(req, "model-repository") or await self._repository(req, match)
        if path == "/v2/trace/setting":
            return self._refusal(req, "trace") or await self.endpoints.trace(req)
        return NOT_FOUND

    async def _repository(self, req: HttpRequest, match: re.Match[str]) -> Reply:
        repository = match[1] or ""
        if match[2] == "index":
            return await self.endpoints.repository_index(req, repository)
        return await self.endpoints.repository_control(req, repository, match[3], match[4])

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | bytearray:
        """The whole body, refused early when it exceeds ``max_input_bytes``."""
        for key, value in scope["headers"]:
            if key == b"content-length" and value.isdigit():
                refusal = self.refuse_length(int(value))
                if refusal is not None:
                    raise refusal
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        if not message.get("more_body", False):
            return chunk  # the usual case: one chunk, no copy
        body = bytearray(chunk)
        while message.get("more_body", False):
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            body += message.get("body", b"")
            refusal = self.refuse_length(len(body))
            if refusal is not None:
                raise refusal
        return body


def _too_large(size: int, limit: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Request body has a byte_size ({size} bytes) that exceeds the maximum allowed value of "
        f"{limit} bytes. Use --http-max-input-size to increase the limit."
    )


async def _lifespan(receive: Receive, send: Send) -> None:
    """Accept ASGI lifespan events; the core's lifecycle is owned by the hosting code."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_app(
    core: ServingCore,
    *,
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES,
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS,
    log_settings: LogSettings | None = None,
    restrictions: Restrictions | None = None,
    shared_memory: SharedMemoryRegistry | None = None,
    tracer: TraceManager | None = None,
) -> HttpApp:
    """The ASGI application serving Triton's HTTP/REST API for ``core``.

    ``max_input_bytes`` is tritonserver's ``--http-max-input-size``; ``extensions`` is what
    ``GET /v2`` advertises; ``log_settings`` is the state ``/v2/logging`` reads and updates;
    ``restrictions`` are the API groups that need a header (``--http-restricted-api``);
    ``shared_memory`` holds the registered regions (a new, empty registry when not given; the
    hosting server passes the one its gRPC endpoint shares); ``tracer`` the trace settings
    (tracing off when not given; the hosting server passes its core's).
    """
    return HttpApp(
        core,
        max_input_bytes=max_input_bytes,
        extensions=extensions,
        log_settings=log_settings,
        restrictions=restrictions,
        shared_memory=shared_memory,
        tracer=tracer,
    )


__all__ = ["DEFAULT_MAX_INPUT_BYTES", "HttpApp", "create_app"]
