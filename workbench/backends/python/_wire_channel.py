"""Small control messages between the server and a stub process, over one socket.

A message is a pickled tuple ``(kind, key, *payload)`` behind a 4-byte length. Any thread may
send. Any thread may wait for the message filed under a key (the reply to its call): whichever
waiting thread finds nobody reading becomes the reader, files what arrives under its key (or
hands it to ``route``) and wakes the others, so a lone thread never pays for a hand-off to a
reader thread. ``route`` sees every message first and returns the key to file it under, or
``None`` when it dealt with the message itself (it must not block).
"""

from __future__ import annotations

import contextlib
import pickle
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

_LENGTH = struct.Struct("<I")
#: what one ``recv`` reads at most; a longer frame is assembled over several reads
_CHUNK = 1 << 16
#: how often a waiting reader checks ``alive`` when nothing arrives
_POLL_S = 1.0

Message = tuple[Any, ...]


class ChannelClosed(Exception):
    """The other side is gone (EOF, a broken socket, or it is not alive any more)."""


class Channel:
    """Framed messages over a connected stream socket, shared by several threads."""

    def __init__(
        self,
        sock: socket.socket,
        route: Callable[[Message], Hashable | None],
        alive: Callable[[], bool] | None = None,
    ) -> None:
        self._sock = sock
        self._route = route
        self._alive = alive
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)
        if alive is not None:
            # A blocking recv() that gives up now and then (EAGAIN) so that we can check the
            # peer still lives, without a poll() before every recv(); sends stay blocking.
            seconds = struct.pack("ll", int(_POLL_S), int(_POLL_S % 1 * 1e6))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, seconds)
        #: the start of a frame that has not fully arrived yet
        self._buffer = bytearray()
        #: where each ``recv`` lands (one reader at a time: ``_reading``), so that a read
        #: neither allocates nor copies when it holds whole frames, as it usually does
        self._chunk = bytearray(_CHUNK)
        self._chunk_view = memoryview(self._chunk)
        self._send_lock = threading.Lock()
        # ``with self._lock`` (C) rather than ``with self._cond`` (a Python-level __enter__):
        # every message takes it at least twice.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._filed: dict[Hashable, Message] = {}
        self._reading = False
        self._closed = False
        #: threads blocked in ``_take_or_lead`` (only they need a notify)
        self._waiting = 0

    def send(self, message: Message) -> None:
        """Send one message (from any thread); raises ``ChannelClosed`` if the peer is gone."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        self._write(_LENGTH.pack(len(data)) + data)

    def send_all(self, messages: list[Message]) -> None:
        """Send several messages in one write (they arrive together, in order)."""
        frames = [pickle.dumps(m, protocol=pickle.HIGHEST_PROTOCOL) for m in messages]
        self._write(b"".join(_LENGTH.pack(len(frame)) + frame for frame in frames))

    def _write(self, data: bytes) -> None:
        # acquire/release rather than ``with``: a third of the cost, on every message
        lock = self._send_lock
        lock.acquire()
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None
        finally:
            lock.release()

    def wait(self, key: Hashable, timeout_s: float | None = None) -> Message:
        """The message filed under ``key``; ``TimeoutError`` after ``timeout_s``."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        lock = self._lock
        while True:
            lock.acquire()
            try:
                if key in self._filed:
                    return self._filed.pop(key)
                if self._reading or self._closed or deadline is not None:
                    found = self._take_or_lead(key, deadline)
                else:  # the usual case: nobody reads, so this thread does
                    self._reading = True
                    found = None
            finally:
                lock.release()
            if found is None:
                found = self._read_some(key, deadline)
            if found is not None:
                return found

    def _take_or_lead(self, key: Hashable, deadline: float | None) -> Message | None:
        """Under the lock: the filed message, or None once this thread is the reader."""
        while True:
            if key in self._filed:
                return self._filed.pop(key)
            if self._closed:
                raise ChannelClosed("the stub process closed its connection")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            if not self._reading:
                self._reading = True
                return None
            self._waiting += 1
            try:
                self._cond.wait(remaining)
            finally:
                self._waiting -= 1

    def _read_some(self, key: Hashable, deadline: float | None) -> Message | None:
        """As the reader: read what is there (or until ``deadline``), then step down.

        The message for ``key`` itself is returned rather than filed.
        """
        mine = None
        filed: list[tuple[Hashable, Message]] = []
        closed = False
        try:
            for message in self._receive(deadline):
                routed = self._route(message)
                if routed == key:
                    mine = message
                elif routed is not None:
                    filed.append((routed, message))
        except ChannelClosed:
            closed = True
        self._lock.acquire()
        try:
            self._reading = False
            self._closed = self._closed or closed
            if filed:
                self._filed.update(filed)
            if self._waiting:  # someone may be waiting for a message, or to read
                self._cond.notify_all()
        finally:
            self._lock.release()
        return mine

    def _receive(self, deadline: float | None) -> list[Message]:
        """Whole messages from the socket: at least one, or none once ``deadline`` passed.

        (``_buffer`` never holds a whole frame between reads: each read parses them all.)
        """
        while True:
            if self._closed:
                raise ChannelClosed("the channel was closed")
            if deadline is not None:
                wait_s = min(_POLL_S, deadline - time.monotonic())
                if wait_s <= 0:
                    return []
                if not self._poll.poll(int(wait_s * 1000) + 1):
                    self._check_alive()
                    continue
            try:
                size = self._sock.recv_into(self._chunk)
            except BlockingIOError:  # SO_RCVTIMEO ran out: nothing arrived for a while
                self._check_alive()
                continue
            except OSError as exc:
                raise ChannelClosed(str(exc)) from None
            if not size:
                raise ChannelClosed("the stub process closed its connection")
            messages = self._parse_chunk(size)
            if messages:
                return messages

    def _check_alive(self) -> None:
        """After a read gave up: ``ChannelClosed`` if the peer is dead and sent nothing more.

        What it sent just before it died (a failed ``initialize``'s reply, then its exit) may
        have landed between the read giving up and this check: that is read first."""
        if self._alive is not None and not self._alive() and not self._poll.poll(0):
            raise ChannelClosed("the stub process is not alive")

    def _parse_chunk(self, size: int) -> list[Message]:
        """The whole frames once ``size`` more bytes landed in ``_chunk``.

        What is left of a frame that has not fully arrived is kept in ``_buffer``.
        """
        buffer = self._buffer
        if buffer:  # the rest of a frame begun earlier: assemble it there
            buffer += self._chunk_view[:size]
            messages, start = _frames(buffer, len(buffer))
            del buffer[:start]
            return messages
        messages, start = _frames(self._chunk_view, size)
        if start < size:
            buffer += self._chunk_view[start:size]
        return messages

    # -- for a reader that is not a waiting thread (``LoopReader``) ---------------------------
    def take_reader(self) -> bool:
        """Become the reader until ``give_back_reader`` (False: a thread reads, or closed)."""
        with self._lock:
            if self._reading or self._closed:
                return False
            self._reading = True
            return True

    def give_back_reader(self) -> None:
        with self._lock:
            self._reading = False
            self._cond.notify_all()

    def read_nowait(self) -> list[tuple[Hashable, Message]]:
        """As the reader: read what arrived; the (key, message) pairs ``route`` filed.

        Raises ``BlockingIOError`` when nothing arrived and ``ChannelClosed`` at the end.
        """
        try:
            size = self._sock.recv_into(self._chunk, _CHUNK, socket.MSG_DONTWAIT)
        except BlockingIOError:
            raise
        except OSError as exc:
            raise ChannelClosed(str(exc)) from None
        if not size:
            raise ChannelClosed("the stub process closed its connection")
        filed = []
        for message in self._parse_chunk(size):
            key = self._route(message)
            if key is not None:
                filed.append((key, message))
        return filed

    def file(self, filed: list[tuple[Hashable, Message]]) -> None:
        """File messages for the threads waiting on their keys."""
        with self._lock:
            self._filed.update(filed)
            self._cond.notify_all()

    def mark_closed(self) -> None:
        """The peer is gone: every waiting thread gets ``ChannelClosed``."""
        with self._lock:
            self._closed = True
            self._cond.notify_all()

    @property
    def sock(self) -> socket.socket:
        return self._sock

    def pump(self) -> None:
        """Read and route messages until the channel closes (a dedicated reader thread)."""
        try:
            self.wait(object())
        except ChannelClosed:
            return

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout_s: float = 5.0) -> None:
        """Close the channel: wake every waiting thread, let the reader step down, close.

        ``shutdown`` wakes a reader blocked on the socket without freeing its descriptor, so
        the number cannot be reused under a ``recv`` still in progress.
        """
        with self._lock:
            self._closed = True
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._reading and (remaining := deadline - time.monotonic()) > 0:
                self._cond.wait(remaining)
        self._sock.close()


def _frames(data: bytearray | memoryview, size: int) -> tuple[list[Message], int]:
    """The whole frames in ``data[:size]`` and where the first incomplete one starts."""
    messages = []
    start = 0
    while size - start >= _LENGTH.size:
        (length,) = _LENGTH.unpack_from(data, start)
        end = start + _LENGTH.size + length
        if end > size:
            break
        messages.append(pickle.loads(data[start + _LENGTH.size : end]))
        start = end
    return messages, start
