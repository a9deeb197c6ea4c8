"""The native gRPC front end: gRPC's C++ server carries the calls, our servicer answers them.

grpcio's Python server spends 300-770 µs of CPU on every call here, more than our whole HTTP
path (``benchmarks/README.md``, ``grpc_cpu.py``), so over gRPC the server was half as fast as
Triton. ``_native`` (``_native.cpp``, built where gRPC's C++ library is, see ``setup.py``) runs
gRPC's C++ server, the library Triton's own front end uses, on its own threads and hands each
call to the event loop as one event with the method, its metadata and its message's bytes.

This module turns those events into calls of the same servicer grpc.aio serves
(``service.InferenceService``, through the same handlers as ``unparsable.add_service``
registers): a ``NativeCall`` is the handler's ``context`` (the part of
``grpc.aio.ServicerContext`` the service uses: ``abort``, ``write``, ``invocation_metadata``,
``add_done_callback``, ``set_compression``), and a stream's
requests are an async iterator fed by the call's messages. Restricted protocols are refused
here, before the handler, as the grpc.aio interceptor refuses them. A call's first step runs
inside the drain that read it (``start_eagerly``): a ``ModelInfer`` is queued at the
scheduler before the loop reads anything else, so a reply read in the same loop turn finds
it there, and a task is made only for the rest.

A ``ModelInfer`` request of ``shared_buffers.SHARED_BYTES`` or more arrives in a memfd (copied
there by gRPC's thread), which a Python model's stub maps instead of receiving a copy: from
then on one copy of the tensor in the server (issue #12). A reply of 64 KiB or more is lent to
gRPC in its parts (``response_codec.serialize_response_parts``), neither joined nor copied.
"""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from typing import Any, NoReturn

import grpc

from workbench import shared_buffers, threads
from workbench.server.grpc.restriction import RestrictedMethods
from workbench.server.grpc.unparsable import UNPARSABLE, UNPARSABLE_MESSAGE
from workbench.server.restricted import Restrictions

try:
    from workbench.server.grpc import _native
except ImportError:  # not built: no gRPC C++ library where the package was installed
    _native = None  # type: ignore[assignment]

log = logging.getLogger("workbench.server.grpc")

_SERVICE = "/inference.GRPCInferenceService/"
_STREAMING = (_SERVICE + "ModelStreamInfer",)
#: requests that may arrive in a shared buffer: those whose tensors a stub can map
_SHARED_METHOD = _SERVICE + "ModelInfer"
#: a stream's writes queued in gRPC before ``write`` waits for them (grpc.aio waits for each)
WRITE_AHEAD = 16
_OK = grpc.StatusCode.OK.value[0]
_CANCELLED = grpc.StatusCode.CANCELLED.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_UNKNOWN = grpc.StatusCode.UNKNOWN.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_END = object()


def available() -> bool:
    """Whether the native front end was built into this installation."""
    return _native is not None


class NativeCall:
    """One call: the ``context`` its handler gets, and a stream's incoming requests."""

    __slots__ = (
        "id",
        "method",
        "task",
        "code",
        "details",
        "cancelled",
        "_server",
        "_metadata",
        "_handler",
        "_done_callbacks",
        "_inbox",
        "_drained",
        "_unwritten",
    )

    def __init__(
        self, server: NativeServer, call_id: int, method: str, metadata: tuple[Any, ...]
    ) -> None:
        self.id = call_id
        self.method = method
        self.task: asyncio.Task[None] | None = None
        #: the status ``abort`` set (an int code) and its message
        self.code = _OK
        self.details = ""
        self.cancelled = False
        self._server = server
        self._metadata = metadata
        self._handler: Any = None
        self._done_callbacks: list[Callable[[Any], None]] | None = None
        self._inbox: asyncio.Queue[Any] | None = None
        self._drained: asyncio.Future[None] | None = None
        #: responses written but not yet reported sent
        self._unwritten = 0

    # -- the part of grpc.aio.ServicerContext the service uses -------------------------------
    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> NoReturn:
        """End the call with ``code``: raises ``grpc.aio.AbortError``, as grpc.aio does."""
        self.code, self.details = code.value[0], details
        raise grpc.aio.AbortError()

    def set_compression(self, compression: grpc.Compression) -> None:
        self._server.native.set_compression(self.id, int(compression.value))

    def set_reading(self, on: bool) -> None:
        """Whether gRPC reads this stream's next message (see ``stream.StreamSession``)."""
        self._server.native.set_reading(self.id, on)

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        if self._done_callbacks is None:
            self._done_callbacks = []
        self._done_callbacks.append(callback)

    async def write(self, message: Any) -> None:
        """Send one response of a stream; waits while ``WRITE_AHEAD`` are still unwritten."""
        self._server.native.write(self.id, self._handler.response_serializer(message))
        self._unwritten += 1
        if self._unwritten > WRITE_AHEAD and not self.cancelled:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    # -- fed by the server ------------------------------------------------------------------
    async def requests(self) -> AsyncIterator[Any]:
        """The stream's requests as the client sends them, until it is done sending."""
        assert self._inbox is not None
        while (data := await self._inbox.get()) is not _END:
            try:
                request = self._handler.request_deserializer(data)
            except Exception:  # noqa: BLE001 - protobuf's DecodeError and the like
                # The handler's reader cannot end the call: it is ended from outside.
                self.code, self.details = _INTERNAL, UNPARSABLE_MESSAGE
                if self.task is not None:
                    self.task.cancel()
                return
            yield request

    def react(self, event: tuple[Any, ...]) -> None:
        """One event of this call's (its beginning aside)."""
        kind = event[0]
        if kind == _native.MESSAGE:
            if self._inbox is not None:
                self._inbox.put_nowait(event[2])
        elif kind == _native.HALF_CLOSE:
            if self._inbox is not None:
                self._inbox.put_nowait(_END)
        elif kind == _native.WRITE_DONE:
            self._write_done()
        elif kind == _native.CANCEL:
            self.cancelled = True
            if self.task is not None:
                self.task.cancel()
        elif kind == _native.DONE:
            self._done()

    def _write_done(self) -> None:
        self._unwritten -= 1
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _done(self) -> None:
        self._wake_writer()  # a writer still waiting: the call is over
        for callback in self._done_callbacks or ():
            try:
                callback(self)
            except Exception:  # noqa: BLE001 - one callback's failure ends nothing else
                log.exception("a gRPC call's done callback failed")


class NativeServer:
    """gRPC's C++ server, its calls served by ``handlers`` on the running event loop."""

    def __init__(
        self, handlers: dict[str, grpc.RpcMethodHandler], restrictions: Restrictions
    ) -> None:
        if _native is None:
            raise RuntimeError("the native gRPC front end is not built in this installation")
        self.handlers = handlers
        self.restricted = RestrictedMethods(restrictions)
        share_from = shared_buffers.SHARED_BYTES if shared_buffers.available() else 0
        self.native = _native.Server(
            streaming=_STREAMING, share_method=_SHARED_METHOD, share_from=share_from
        )
        self.calls: dict[int, NativeCall] = {}
        #: events of the drain under way still to be handled after the current one
        self._unread = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    def start(self, target: str, channel_arguments: list[tuple[str, int | str]]) -> int:
        """Listen on ``target``; the bound port (0: it could not listen there). Call on the
        loop that is to serve the calls."""
        port = int(self.native.start(target, channel_arguments))
        if port:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self.native.fileno(), self._drain)
        return port

    async def stop(self, grace_s: float | None) -> None:
        """Refuse new calls; those running get ``grace_s`` to finish, then are cancelled."""
        loop = self._loop
        if loop is None or self._stopping:
            return
        self._stopping = True
        try:
            # Blocking until the calls are done: on a pool, while this loop serves them (a
            # call accepted just before the stop may still arrive, and is served too).
            closing = threads.pool(threads.Work.CLOSE)
            await loop.run_in_executor(closing, self.native.shutdown, grace_s or 0.0)
        finally:
            loop.remove_reader(self.native.fileno())
            self._drain()  # the last calls' done events
            self._loop = None

    def _drain(self) -> None:
        events = self.native.drain()
        unread = len(events)
        for event in events:
            unread -= 1
            self._unread = unread
            try:
                self._react(event)
            except Exception as exc:  # noqa: BLE001 - one event's failure loses no other
                log.exception("a gRPC event could not be handled: %r", event[:2])
                if event[0] == _native.CALL and event[1] not in self.calls:  # never answered
                    _close_shared(event[4])
                    details = f"the request could not be served: {exc}"
                    self.native.finish(event[1], _INTERNAL, details, None, False)

    def _react(self, event: tuple[Any, ...]) -> None:
        if event[0] == _native.CALL:
            self._begin(*event[1:])
            return
        # DONE is the call's last event: it leaves the table as it is handled
        calls = self.calls
        call = calls.pop(event[1], None) if event[0] == _native.DONE else calls.get(event[1])
        if call is not None:
            call.react(event)

    def _begin(self, call_id: int, method: str, metadata: tuple[Any, ...], message: Any) -> None:
        handler = self.handlers.get(method)
        refusal = None if handler is None else self.restricted.refusal(method, metadata)
        if handler is None or refusal is not None:
            _close_shared(message)
            # gRPC C++'s own answer to an unknown method; Triton's to a restricted one
            code, details = (_UNIMPLEMENTED, "") if refusal is None else (_UNAVAILABLE, refusal)
            self.native.finish(call_id, code, details, None, False)
            return
        if isinstance(message, tuple):  # (descriptor, size): a shared buffer
            try:
                message = shared_buffers.adopt(*message)
            except (OSError, ValueError) as exc:  # mmap refused (no memory, say)
                log.warning("a gRPC request of %d bytes could not be mapped: %s", message[1], exc)
                details = f"failed to read the request: {exc}"
                self.native.finish(call_id, _INTERNAL, details, None, False)
                return
        call = NativeCall(self, call_id, method, metadata)
        call._handler = handler
        self.calls[call_id] = call
        if handler.unary_unary is None:
            call._inbox = asyncio.Queue()
        assert self._loop is not None
        # Its first step now, inside this drain: the request reaches the scheduler before the
        # loop reads anything else (a stub's reply read next finds it queued), and a task is
        # made only for the rest (benchmarks/README.md, "The first step in the drain").
        try:
            call.task = start_eagerly(self._loop, self._serve(call, handler, message))
        except Exception:  # noqa: BLE001 - _serve answers every failure; only its last
            # resort (a second native.finish) can fail, and the call is then past answering
            log.exception("a gRPC call could not be answered")

    async def _serve(self, call: NativeCall, handler: Any, message: Any) -> None:
        """Serve ``call`` (a unary call's reply is serialised; a stream writes its own) and end
        it: OK with the reply, or the status its handler's failure says. (A call cancelled
        before this starts is ended by the C++ side, which ends every cancelled call.)"""
        code, details, reply = _OK, "", None
        try:
            if call._inbox is None:
                reply = await self._unary(call, handler, message)
            else:
                await self._stream(call, handler)
        except grpc.aio.AbortError:
            code, details = call.code, call.details
        except asyncio.CancelledError:
            code, details = _cancelled(call)
        except Exception as exc:  # noqa: BLE001 - a bug ends this call, not the server
            log.exception("unexpected error while serving a gRPC call", exc_info=exc)
            code, details = _UNKNOWN, f"Unexpected {type(exc)}: {exc}"
        self._finish(call, code, details, reply)

    @staticmethod
    async def _unary(call: NativeCall, handler: Any, message: Any) -> Any:
        # None: the client sent no request message
        request = UNPARSABLE if message is None else handler.request_deserializer(message)
        if request is UNPARSABLE:
            await call.abort(grpc.StatusCode.INTERNAL, UNPARSABLE_MESSAGE)
        return handler.response_serializer(await handler.unary_unary(request, call))

    def _finish(self, call: NativeCall, code: int, details: str, reply: Any = None) -> None:
        """End ``call``; DONE comes back only for done callbacks (a traced call's) or a stream:
        else the call is forgotten now."""
        tell_done = call._done_callbacks is not None or call._inbox is not None
        if not tell_done:
            self.calls.pop(call.id, None)
        # Alone (no other call in flight, none left in this drain), the loop has nothing else
        # to do: it sends the reply itself, one thread hop less; else the sender thread does,
        # and the loop goes on.
        here = not self.calls and not self._unread
        try:
            self.native.finish(call.id, code, details, reply, tell_done, here)
        except Exception as exc:  # noqa: BLE001 - a reply that is not bytes: a bug of ours
            log.exception("a gRPC reply could not be sent", exc_info=exc)
            self.native.finish(call.id, _INTERNAL, f"the reply could not be sent: {exc}")

    @staticmethod
    async def _stream(call: NativeCall, handler: Any) -> None:
        await handler.stream_stream(call.requests(), call)


#: asyncio starts a task eagerly itself (Python 3.12+)
_EAGER_TASKS = sys.version_info >= (3, 12)


def start_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]
) -> asyncio.Task[Any] | None:
    """Run ``coro`` up to its first wait in this call, then on in a task (None: it ended in
    this call). A request thus reaches the scheduler in the loop step that read it.

    Python 3.12's ``eager_start`` does this (a failure of the first step is then the task's).
    Before it, the first step runs here, in a context of its own as a task's would (nothing it
    sets leaks into the caller's; a failure of it is raised here), ``asyncio.current_task()``
    being None meanwhile; a task then drives the rest from that context (``_CarriedOn``)."""
    if _EAGER_TASKS:
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg]
    context = contextvars.copy_context()
    try:
        waiting = context.run(coro.send, None)
    except StopIteration:
        return None
    return context.run(loop.create_task, _CarriedOn(coro, waiting))


_TAKEN = object()


class _CarriedOn(collections.abc.Coroutine[Any, Any, Any]):
    """The rest of a coroutine whose first step ran outside a task, as a coroutine for a
    task to drive: the task's first step gets what the coroutine already waits for, and every
    wake-up (a result sent, a cancellation thrown) goes on to the coroutine. A cancellation
    before that first step cancels what the coroutine waits for, as a task cancelled while
    waiting does, and reaches the coroutine where it waits."""

    __slots__ = ("_coro", "_waiting")

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
        self._coro = coro
        #: what the coroutine waits for, until the task has taken it (then ``_TAKEN``)
        self._waiting: Any = waiting

    def send(self, value: Any) -> Any:
        waiting = self._waiting
        if waiting is not _TAKEN:
            self._waiting = _TAKEN
            return waiting
        return self._coro.send(value)

    def throw(self, *error: Any) -> Any:
        waiting = self._waiting
        if waiting is not _TAKEN:
            self._waiting = _TAKEN
            if isinstance(waiting, asyncio.Future):
                waiting.cancel()
        return self._coro.throw(*error)

    def close(self) -> None:
        self._waiting = _TAKEN
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:  # the protocol's; tasks call send
        raise TypeError("driven by its task, not awaited")


def _close_shared(message: Any) -> None:
    """Close the memfd of a request that will not be served (a shared buffer's descriptor)."""
    if isinstance(message, tuple):
        os.close(message[0])


def _cancelled(call: NativeCall) -> tuple[int, str]:
    """The status of a call whose handler was cancelled: the one set before cancelling it, or
    CANCELLED (the client's cancel or deadline, whose status gRPC has already sent)."""
    return (call.code, call.details) if call.code != _OK else (_CANCELLED, "Cancelled")


__all__ = ["WRITE_AHEAD", "NativeCall", "NativeServer", "available"]
