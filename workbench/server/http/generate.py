"""Triton's generate extension: ``POST /v2/models/{m}[/versions/{v}]/generate[_stream]``.

Mirrors ``HTTPAPIServer::HandleGenerate`` and ``GenerateRequestClass`` in Triton 2.51's
``src/http_server.cc``:

- Errors before inference (unknown model, compressed body, bad JSON, a request the core
  rejects) answer ``{"error": ...}`` as ``application/json`` with the error's status.
- Otherwise the reply is chunked and its status is that of the *first* response (an error
  response sets its error's status; a final flag without a response, 200).
- ``generate_stream``: ``text/event-stream; charset=utf-8``, one ``data: <json>\\n\\n`` event per
  response, ``data: {"error": ...}\\n\\n`` for an error response; a final flag without a
  response adds nothing.
- ``generate``: ``application/json``, the single response's JSON (or error); any other number
  of responses answers Triton's "exactly 1 response" error, with the status already chosen.

Responses come from ``InferenceCore.infer_stream`` (several for a decoupled model, one for the
others). When the client goes away the core's iterator is closed.

Tracing, as Triton 2.51 writes it (observed; ``docs/triton-trace-facts.md``): HTTP_RECV_START/END,
then the core's entries; INFER_RESPONSE_COMPLETE for every response the core gives (a bare final
flag included); HTTP_SEND_START and HTTP_SEND_END, both with ``ns`` 0, for every event
``generate_stream`` writes and for the one response ``generate`` writes. A request refused before
the core has only HTTP_RECV_START/END. The trace is written once the reply is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator

from workbench.core.contract import ServingCore
from workbench.core.request import InferResponse
from workbench.core.trace import InferenceTrace
from workbench.core.trace_settings import TraceManager
from workbench.errors import InvalidArgumentError, WorkbenchError
from workbench.server.http import _json, tracing
from workbench.server.http.generate_codec import (
    decode_generate_request,
    encode_generate_response,
    input_metadata,
)
from workbench.server.http.messages import (
    JSON_TYPE,
    HttpRequest,
    Receive,
    Reply,
    Send,
    error_reply,
    json_reply,
    send_reply,
)
from workbench.server.status import error_message, http_status

log = logging.getLogger("workbench.server.http")

_EVENT_STREAM_TYPE = (b"content-type", b"text/event-stream; charset=utf-8")
_METHOD_NOT_ALLOWED = json_reply({"error": "Method Not Allowed"}, 405)  # typed JSON here
_NOT_ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that "
    "generates various number of responses"
)
#: Triton answers a request its core refuses (validation, unknown or unavailable model) with a
#: plain JSON error (``infer_stream`` raises those at the call), but an error that comes back
#: as a response with 400 whatever its code (observed: an INTERNAL error response, which
#: ``/infer`` answers with 500, makes ``generate_stream`` answer 400).
_ERROR_RESPONSE_STATUS = 400


class GenerateEndpoint:
    """Serves ``generate`` and ``generate_stream`` on one ``InferenceCore``."""

    def __init__(self, core: ServingCore, tracer: TraceManager | None = None) -> None:
        self.core = core
        self.tracer = tracer if tracer is not None else TraceManager()

    async def __call__(
        self, req: HttpRequest, model: str, version: str, streaming: bool
    ) -> Reply | GenerateReply:
        if req.method != "POST":
            return _METHOD_NOT_ALLOWED
        trace = tracing.sample(self.tracer, model, req) if self.tracer.enabled else None
        try:
            inputs = input_metadata(self.core.model_metadata(model, version))
            encoding = req.header(b"content-encoding")
            if encoding not in (None, b"", b"identity"):
                raise InvalidArgumentError(
                    "Unsupported content-encoding, only 'identity' is supported."
                )
            request = decode_generate_request(req.body, model, version, inputs)
            request.trace = trace
            if trace is not None:
                trace.start()
            return GenerateReply(self.core.infer_stream(request), streaming, trace)
        except Exception:
            if trace is not None:  # refused before the core: HTTP_RECV_START/END only
                trace.release()
            raise


def _is_flag_only(response: InferResponse) -> bool:
    """A final flag that carries no response (Triton's ``COMPLETE_FINAL`` without one)."""
    return response.final and not response.outputs and not response.parameters


#: replies' closing work still running after their task was cancelled (see ``_send_guarded``)
_FINISHING: set[asyncio.Future[None]] = set()


class GenerateReply:
    """The reply of a generate request: sent as the core's responses arrive."""

    def __init__(
        self,
        responses: AsyncIterator[InferResponse],
        streaming: bool,
        trace: InferenceTrace | None = None,
    ) -> None:
        self.responses = responses
        self.streaming = streaming
        self.started = False
        self.trace = trace

    async def respond(self, send: Send, receive: Receive) -> None:
        """Send the reply; stop (and close the core's stream) when the client goes away."""
        sending = asyncio.ensure_future(self._send_guarded(send))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((sending, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sending, gone):
                task.cancel()
            await asyncio.gather(sending, gone, return_exceptions=True)

    async def _send_guarded(self, send: Send) -> None:
        try:
            await self._send(send)
        except Exception as exc:  # noqa: BLE001 - a bug must not take the server down
            if not self.started:
                await send_reply(send, error_reply(exc))
            else:
                log.exception("generate stream failed after its reply started", exc_info=exc)
        finally:
            # Shielded: the client may hang up as soon as it has the reply, and ``respond``
            # then cancels this task; the core's stream must still close (ending its
            # execution's bookkeeping and reporting its trace) and the trace be written.
            finishing = asyncio.ensure_future(self._finish())
            _FINISHING.add(finishing)  # held until done: a cancelled waiter drops its reference
            finishing.add_done_callback(_FINISHING.discard)
            await asyncio.shield(finishing)

    async def _finish(self) -> None:
        await _close(self.responses)
        if self.trace is not None:  # the core reported it when its stream closed
            self.trace.release()

    async def _send(self, send: Send) -> None:
        async with contextlib.aclosing(self._events()) as events:
            if self.streaming:
                await self._send_events(send, events)
            else:
                status, body, single = await _single_body(events)
                await self._start(send, status, JSON_TYPE)
                await _chunk(send, body)
                if single:
                    self._sent()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_events(self, send: Send, events: AsyncIterator[tuple[int, bytes]]) -> None:
        first = await anext(events, None)
        await self._start(send, 200 if first is None else first[0], _EVENT_STREAM_TYPE)
        if first is not None:
            await self._send_event(send, first[1])
        async for _, event in events:
            await self._send_event(send, event)

    async def _send_event(self, send: Send, event: bytes) -> None:
        await _chunk(send, event)
        if event:
            self._sent()

    def _capture(self, name: str, ns: int) -> None:
        if self.trace is not None:
            self.trace.capture(name, ns)

    def _sent(self) -> None:
        """A response went out: Triton 2.51 stamps a generate reply's sends with 0."""
        self._capture("HTTP_SEND_START", 0)
        self._capture("HTTP_SEND_END", 0)

    async def _events(self) -> AsyncGenerator[tuple[int, bytes], None]:
        """(status, body) per core response; an empty body for a bare final flag."""
        while True:  # ends with the core's stream: its final response, its end or an error
            try:
                response = await anext(self.responses)
            except StopAsyncIteration:
                return
            except Exception as exc:  # noqa: BLE001 - every failure becomes an error event
                if not isinstance(exc, WorkbenchError):
                    log.exception("a streamed inference failed", exc_info=exc)
                if self.trace is not None:
                    tracing.response_complete(self.trace)
                yield _ERROR_RESPONSE_STATUS, self._frame(_error_json(error_message(exc)))
                return
            self._capture("INFER_RESPONSE_COMPLETE", time.monotonic_ns())
            yield self._event(response)
            if response.final:
                return

    def _event(self, response: InferResponse) -> tuple[int, bytes]:
        if _is_flag_only(response):
            return 200, b""
        try:
            return 200, self._frame(encode_generate_response(response))
        except WorkbenchError as exc:
            return http_status(exc), self._frame(_error_json(exc.message))

    def _frame(self, body: bytes) -> bytes:
        return b"data: " + body + b"\n\n" if self.streaming else body

    async def _start(self, send: Send, status: int, content_type: tuple[bytes, bytes]) -> None:
        # No content-length: the reply is chunked, as Triton's evhtp_send_reply_chunk_start.
        await send({"type": "http.response.start", "status": status, "headers": [content_type]})
        self.started = True


async def _single_body(events: AsyncIterator[tuple[int, bytes]]) -> tuple[int, bytes, bool]:
    """The status of the first event and the one response (Triton's error unless exactly 1),
    and whether there was exactly one."""
    status: int | None = None
    bodies: list[bytes] = []
    async for event_status, body in events:
        status = event_status if status is None else status
        if body:
            bodies.append(body)
    single = len(bodies) == 1
    body = bodies[0] if single else _error_json(_NOT_ONE_RESPONSE)
    return 200 if status is None else status, body, single


def _error_json(message: str) -> bytes:
    return _json.dumps({"error": message})


async def _chunk(send: Send, body: bytes) -> None:
    if body:
        await send({"type": "http.response.body", "body": body, "more_body": True})


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (the request body was read before)."""
    while True:  # after the body, only the disconnect (or the reply's end) comes
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _close(responses: AsyncIterator[InferResponse]) -> None:
    close = getattr(responses, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # noqa: BLE001 - the reply is over; only tell
        log.exception("closing a core response stream failed")


__all__ = ["GenerateEndpoint", "GenerateReply"]
