"""A loop timer with microsecond precision, for sub-millisecond queue delays.

The event loop's own timers are millisecond-grained (libuv rounds a 100 us ``call_later``
down to 0, asyncio's selector rounds its timeout up to 1 ms), and yielding to the loop until
a deadline keeps a CPU at 100 % for the whole wait, a CPU that the model's stub process and
the clients need. On Linux a ``timerfd`` armed at the deadline wakes the loop's own poll on
time (within tens of microseconds) and costs nothing while waiting. Elsewhere waits of 2 ms
or more use the loop's timers and shorter ones yield to the loop until the deadline.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
import time
from collections.abc import Callable

#: below this, the fallback yields to the loop instead of trusting its millisecond timers
_LOOP_TIMER_RESOLUTION_NS = 2_000_000
_CLOCK_MONOTONIC = 1  # time.monotonic_ns() reads this clock on Linux
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc_timerfd() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's ``timerfd_create`` and ``timerfd_settime``, or ``None`` where there are none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes = [ctypes.c_int, ctypes.c_int]
    settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
    return create, settime


_TIMERFD = _libc_timerfd()


class DeadlineTimer:
    """Calls ``callback`` on the running loop at a ``time.monotonic_ns()`` deadline.

    One deadline at a time: arming again replaces it. A call may come a little after the
    deadline, or (after a re-arm) once without a reason, so the callback re-checks its state.
    """

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fd = -1
        self._spec = _Itimerspec()
        self._spec_ref = ctypes.byref(self._spec)
        #: the fallback's pending loop callback
        self._handle: asyncio.Handle | None = None
        #: the deadline the timerfd is set to (0: none); setting one costs a system call
        self._deadline_ns = 0

    def arm(self, deadline_ns: int) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._attach(loop)
        if self._fd >= 0:
            if deadline_ns != self._deadline_ns:
                # An all-zero time would disarm it: a deadline at 0 ns is long past anyway.
                self._deadline_ns = max(deadline_ns, 1)
                self._set(_TFD_TIMER_ABSTIME, self._deadline_ns)
            return
        self.disarm()
        self._deadline_ns = deadline_ns
        self._schedule(loop)

    def disarm(self) -> None:
        """Forget the deadline (a call already on its way may still come)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fd >= 0 and self._deadline_ns:
            self._deadline_ns = 0
            self._set(0, 0)

    def close(self) -> None:
        self.disarm()
        self._detach()

    # -- the timerfd ---------------------------------------------------------------------------
    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._detach()
        self._loop = loop
        self._deadline_ns = 0
        if _TIMERFD is None:
            return
        fd = _TIMERFD[0](_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return
        try:
            loop.add_reader(fd, self._on_readable)
        except (NotImplementedError, RuntimeError):  # a loop without add_reader (proactor)
            os.close(fd)
            return
        self._fd = fd

    def _detach(self) -> None:
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1

    def _set(self, flags: int, deadline_ns: int) -> None:
        assert _TIMERFD is not None
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(deadline_ns, 1_000_000_000)
        _TIMERFD[1](self._fd, flags, self._spec_ref, None)

    def _on_readable(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed after it fired: nothing is due yet
            return
        self._deadline_ns = 0
        self._callback()

    # -- the fallback --------------------------------------------------------------------------
    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        remaining = self._deadline_ns - time.monotonic_ns()
        if remaining < _LOOP_TIMER_RESOLUTION_NS:
            self._handle = loop.call_soon(self._poll)
        else:
            self._handle = loop.call_later(remaining / 1e9, self._poll)

    def _poll(self) -> None:
        if time.monotonic_ns() < self._deadline_ns:
            assert self._loop is not None
            self._schedule(self._loop)
            return
        self._handle = None
        self._callback()
