"""The clock a scheduler reads: monotonic nanoseconds, and a loop timer at a deadline on them.

A scheduler takes it as a parameter so that its tests can move time by hand (queue delays,
queue timeouts) instead of racing the real clock, which a loaded machine stalls at random.
The server always uses ``MONOTONIC``, whose ``now_ns`` is ``time.monotonic_ns`` itself (the
hot path pays no extra call), and whose timers are ``DeadlineTimer``'s microsecond ones.
Requests' ``RequestTimes.received`` must be read from the same clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from workbench.core._deadline_timer import DeadlineTimer


class Timer(Protocol):
    """Calls its callback on the running loop once its clock reaches the armed deadline."""

    def arm(self, deadline_ns: int) -> None:
        """Call back at ``deadline_ns`` (replacing any earlier deadline)."""
        ...

    def disarm(self) -> None: ...

    def close(self) -> None: ...


class Clock(Protocol):
    def now_ns(self) -> int:
        """Nanoseconds on a monotonic scale (the scale of ``Pending`` times and deadlines)."""
        ...

    def timer(self, callback: Callable[[], None]) -> Timer:
        """A timer on this clock that calls ``callback``."""
        ...


class MonotonicClock:
    """``time.monotonic_ns()`` and timerfd-backed ``DeadlineTimer``\\ s: the server's clock."""

    now_ns = staticmethod(time.monotonic_ns)

    def timer(self, callback: Callable[[], None]) -> Timer:
        return DeadlineTimer(callback)


MONOTONIC: Clock = MonotonicClock()
