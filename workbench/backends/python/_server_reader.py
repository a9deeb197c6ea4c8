"""Reading a stub's channel from the server's event loop, for ``execute_async``.

A call made from a worker thread costs two thread hand-offs on top of the two process
wake-ups (loop -> worker -> stub -> worker -> loop). When the core awaits ``execute_async``
instead, the loop sends the call itself and reads the reply through ``add_reader``: the
round trip then costs about what an in-process call on a worker thread does.

While attached, the loop is the channel's only reader: replies it is waiting for resolve
futures (or run the callback registered for them, right where they are read), every other
message is routed or filed for the threads that wait for it, as usual.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from collections.abc import Callable, Hashable

from workbench.backends.python._wire_channel import Channel, ChannelClosed, Message

#: gets the reply, or None and the error when the stub went away first
ReplyCallback = Callable[[Message | None, BaseException | None], None]

_log = logging.getLogger("workbench.backends.python")

#: how often the loop checks that the stub still lives while a call waits on it
_WATCHDOG_S = 1.0


class LoopReader:
    """Reads one channel from one event loop (create and use it on the loop's thread)."""

    def __init__(
        self,
        channel: Channel,
        loop: asyncio.AbstractEventLoop,
        alive: Callable[[], bool],
        orphan: Callable[[Message], None],
    ) -> None:
        self.channel = channel
        self.loop = loop
        self._alive = alive
        #: gets a reply whose waiter was cancelled (its shared memory must still be freed)
        self._orphan = orphan
        self._fd = channel.sock.fileno()
        self._futures: dict[Hashable, asyncio.Future[Message]] = {}
        self._callbacks: dict[Hashable, ReplyCallback] = {}
        self._watchdog: asyncio.TimerHandle | None = None
        self.attached = False

    def attach(self) -> bool:
        """Start reading; False when a thread reads the channel (a decoupled model's)."""
        if not self.channel.take_reader():
            return False
        self.loop.add_reader(self._fd, self._on_readable)
        self._watchdog = self.loop.call_later(_WATCHDOG_S, self._check)
        self.attached = True
        return True

    def expect(self, key: Hashable) -> asyncio.Future[Message]:
        """The future of the reply filed under ``key``: ask on the loop's thread, before the
        loop reads again (a reply read earlier would be filed for threads instead)."""
        future: asyncio.Future[Message] = self.loop.create_future()
        self._futures[key] = future
        return future

    def expect_call(self, key: Hashable, callback: ReplyCallback) -> None:
        """Run ``callback`` with the reply filed under ``key`` as soon as it is read."""
        self._callbacks[key] = callback

    def forget(self, key: Hashable) -> None:
        self._futures.pop(key, None)
        self._callbacks.pop(key, None)

    def _on_readable(self) -> None:
        try:
            filed = self.channel.read_nowait()
        except BlockingIOError:
            return
        except ChannelClosed:
            self._end()
            return
        others = []
        for key, message in filed:
            callback = self._callbacks.pop(key, None)
            if callback is not None:
                _call(callback, message, None)
                continue
            future = self._futures.pop(key, None)
            if future is None:
                others.append((key, message))
            elif future.cancelled():
                self._orphan(message)
            elif not future.done():
                future.set_result(message)
        if others:
            self.channel.file(others)

    def _check(self) -> None:
        if not self.attached:
            return
        if (self._futures or self._callbacks) and not self._alive():
            self._end()
            return
        self._watchdog = self.loop.call_later(_WATCHDOG_S, self._check)

    def _end(self) -> None:
        """The stub is gone: stop reading and fail every call waiting on it."""
        self._remove()
        self.channel.mark_closed()
        self._fail_pending(ChannelClosed("the stub process closed its connection"))

    def _fail_pending(self, gone: ChannelClosed) -> None:
        """Fail every call that waits for a reply this reader will not read now."""
        for future in self._futures.values():
            if not future.done():
                future.set_exception(gone)
        self._futures.clear()
        callbacks, self._callbacks = self._callbacks, {}
        for callback in callbacks.values():
            _call(callback, None, gone)

    def _remove(self) -> None:
        if not self.attached:
            return
        self.attached = False
        if self._watchdog is not None:
            self._watchdog.cancel()
        if not self.loop.is_closed():
            self.loop.remove_reader(self._fd)
        self.channel.give_back_reader()

    def _stop_reading(self) -> None:
        """Detached: calls still waiting here would never hear back (their replies go to the
        threads that read the channel from now on), so they fail."""
        self._remove()
        self._fail_pending(ChannelClosed("the stub's connection is no longer read on this loop"))

    def detach(self, timeout_s: float = 5.0) -> None:
        """Stop reading, from any thread (bounded); threads may read the channel again."""
        if not self.attached:
            return
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop or not self.loop.is_running():
            self._stop_reading()
            return
        done: concurrent.futures.Future[None] = concurrent.futures.Future()

        def remove() -> None:
            self._stop_reading()
            done.set_result(None)

        with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError):
            self.loop.call_soon_threadsafe(remove)
            done.result(timeout_s)


def _call(callback: ReplyCallback, reply: Message | None, error: BaseException | None) -> None:
    """A callback's bug must not stop the loop reading the channel for everyone else."""
    try:
        callback(reply, error)
    except Exception:
        _log.exception("a reply callback failed")
