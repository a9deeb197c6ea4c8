"""The request and reply objects the HTTP handlers work with (headers as ASGI lists them)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from workbench.core.trace import InferenceTrace
from workbench.errors import InternalError, WorkbenchError
from workbench.server.http import _json
from workbench.server.status import error_message, http_status

log = logging.getLogger("workbench.server.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

Headers = list[tuple[bytes, bytes]]
#: a request body: ``bytes`` as httptools hands it, or a read-only view of a large body read in
#: place (``connection._BodyReader``)
Body = bytes | bytearray | memoryview
JSON_TYPE = (b"content-type", b"application/json")
#: Triton leaves some replies with evhtp's default type: health, ready, 404/405, early errors.
TEXT_TYPE = (b"content-type", b"text/plain")


@dataclass(slots=True)
class HttpRequest:
    """One HTTP request: method, decoded path, raw ASGI headers and the whole body."""

    method: str
    path: str
    headers: Headers
    body: Body = b""
    #: answered instead of served (a body over the size limit, refused while it arrived)
    refusal: Exception | None = None
    #: when its first bytes and its end arrived (``time.monotonic_ns``), taken only while
    #: tracing is on; 0 otherwise
    recv_start_ns: int = 0
    recv_end_ns: int = 0

    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lower case), or ``None``."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def json(self, default: Any = None) -> Any:
        """The body as JSON; ``default`` when the body is empty."""
        if not self.body and default is not None:
            return default
        return _json.loads(self.body)

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; ``{}`` when empty (Triton's defaults)."""
        value = self.json(default={})
        if not isinstance(value, dict):
            raise InternalError("attempt to access JSON non-object as object")
        return value


@dataclass(slots=True)
class Reply:
    """What a handler answers: status, body and extra headers."""

    status: int = 200
    body: bytes = b""
    headers: Headers = field(default_factory=list)
    #: the request's trace: written once the reply is sent (``server/http/tracing.py``)
    trace: InferenceTrace | None = None
    #: buffers that follow ``body`` on the wire, never joined to it (a large binary output,
    #: sent from where the model left it)
    more: tuple[Any, ...] = ()

    @property
    def length(self) -> int:
        """The body's length in bytes, ``more`` included."""
        if not self.more:
            return len(self.body)
        return len(self.body) + sum(len(part) for part in self.more)


class StreamedReply(Protocol):
    """A reply that sends itself as it is produced (chunked), watching for the client leaving."""

    async def respond(self, send: Send, receive: Receive) -> None:
        """Send the whole reply; never raises for a failure of the request."""


async def send_reply(send: Send, reply: Reply) -> None:
    """Send ``reply`` in one piece, with its ``content-length``."""
    headers = [(b"content-length", str(reply.length).encode()), *reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body, "more_body": bool(reply.more)})
    for index, part in enumerate(reply.more, 1):
        more_body = index < len(reply.more)
        await send({"type": "http.response.body", "body": bytes(part), "more_body": more_body})


def json_reply(value: Any, status: int = 200, plain: bool = False) -> Reply:
    """A JSON body, labelled ``application/json`` (``text/plain`` where Triton does so)."""
    return Reply(status, _json.dumps(value), [TEXT_TYPE if plain else JSON_TYPE])


def error_reply(error: BaseException, plain: bool = False) -> Reply:
    """``{"error": message}`` with the status of the error's category."""
    status = http_status(error)
    if not isinstance(error, WorkbenchError):
        log.exception("unexpected error while serving a request", exc_info=error)
    return json_reply({"error": error_message(error)}, status, plain)


def error_text_reply(status: int, message: str) -> Reply:
    """An error with a fixed status (Triton's 404 "Not Found", 405 "Method Not Allowed")."""
    return json_reply({"error": message}, status, plain=True)


NOT_FOUND = error_text_reply(404, "Not Found")
METHOD_NOT_ALLOWED = error_text_reply(405, "Method Not Allowed")
#: load/unload success: empty, but labelled JSON
EMPTY_OK = Reply(200, b"", [JSON_TYPE])
#: health and ready success
PLAIN_OK = Reply(200, b"", [TEXT_TYPE])


__all__ = [
    "EMPTY_OK",
    "METHOD_NOT_ALLOWED",
    "NOT_FOUND",
    "PLAIN_OK",
    "HttpRequest",
    "Message",
    "Receive",
    "Reply",
    "Scope",
    "Send",
    "StreamedReply",
    "error_reply",
    "error_text_reply",
    "json_reply",
    "send_reply",
]
