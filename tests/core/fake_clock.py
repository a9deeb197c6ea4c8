"""A scheduler clock that moves only when a test says so (``workbench/core/_clock.py``).

With it a queue delay or timeout ends exactly when the test advances past it, however slowly
a loaded machine runs the test: the order of events is fixed, not raced against real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class FakeTimer:
    def __init__(self, clock: FakeClock, callback: Callable[[], None]) -> None:
        self._clock = clock
        self._callback = callback
        #: the armed deadline (0: none)
        self.deadline_ns = 0

    def arm(self, deadline_ns: int) -> None:
        self.deadline_ns = max(deadline_ns, 1)
        self._clock.fire_due()  # a deadline already past calls back at once, like a timerfd

    def disarm(self) -> None:
        self.deadline_ns = 0

    def close(self) -> None:
        self.disarm()

    def fire_if_due(self, now_ns: int) -> None:
        if self.deadline_ns and self.deadline_ns <= now_ns:
            self.deadline_ns = 0
            # on the loop, after the caller's code, as a real timer's call comes
            asyncio.get_running_loop().call_soon(self._callback)


class FakeClock:
    """``now_ns`` stays put until ``advance``, which calls back the timers it passes."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.now = start_ns
        self.timers: list[FakeTimer] = []

    def now_ns(self) -> int:
        return self.now

    def timer(self, callback: Callable[[], None]) -> FakeTimer:
        timer = FakeTimer(self, callback)
        self.timers.append(timer)
        return timer

    def fire_due(self) -> None:
        for timer in self.timers:
            timer.fire_if_due(self.now)

    async def advance(self, ns: int) -> None:
        """Move the clock ``ns`` on; the timers due by then call back, and the loop settles."""
        self.now += ns
        self.fire_due()
        await settle()


async def settle(turns: int = 20) -> None:
    """Let the loop run what is ready now (callbacks and the tasks they wake), no timers."""
    for _ in range(turns):
        await asyncio.sleep(0)
