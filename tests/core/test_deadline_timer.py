"""The microsecond loop timer behind sub-millisecond queue delays (timerfd, and the fallback)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from workbench.core import _deadline_timer
from workbench.core._deadline_timer import DeadlineTimer


async def _fire_after(delay_ns: int) -> int:
    """Arm a timer ``delay_ns`` ahead; how late (ns) its call came."""
    return await _fire_at(time.monotonic_ns() + delay_ns)


async def _fire_at(deadline: int) -> int:
    """Arm a timer at ``deadline``; how late (ns) its call came (10 s: a hang guard)."""
    fired = asyncio.get_running_loop().create_future()
    timer = DeadlineTimer(lambda: fired.done() or fired.set_result(time.monotonic_ns()))
    timer.arm(deadline)
    try:
        return await asyncio.wait_for(fired, 10.0) - deadline
    finally:
        timer.close()


@pytest.mark.parametrize("timerfd", [True, False])
def test_a_sub_millisecond_deadline_is_never_early(
    timerfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not timerfd:
        monkeypatch.setattr(_deadline_timer, "_TIMERFD", None)
    late_ns = asyncio.run(_fire_after(200_000))
    # How late it comes depends on how loaded the machine is, so no upper bound here: the
    # next two tests show that nothing between the deadline and the call rounds to a ms.
    assert late_ns >= 0


@pytest.mark.skipif(_deadline_timer._TIMERFD is None, reason="needs Linux timerfd")
def test_the_timerfd_is_set_to_the_deadline_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _deadline_timer._TIMERFD is not None
    create, settime = _deadline_timer._TIMERFD
    set_to: list[tuple[int, int, int]] = []

    def recording(fd: int, flags: int, spec: Any, old: Any) -> int:
        value = spec._obj.it_value
        set_to.append((flags, value.tv_sec, value.tv_nsec))
        return settime(fd, flags, spec, old)

    monkeypatch.setattr(_deadline_timer, "_TIMERFD", (create, recording))
    deadline = time.monotonic_ns() + 200_000
    late_ns = asyncio.run(_fire_at(deadline))
    assert late_ns >= 0
    # an absolute time on the kernel's clock, to the nanosecond: no timer rounding
    assert set_to[0] == (_deadline_timer._TFD_TIMER_ABSTIME, *divmod(deadline, 1_000_000_000))


def test_without_timerfd_a_sub_millisecond_wait_never_uses_the_loop_timers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The loop's timers are millisecond-grained: below 2 ms the fallback yields to the loop
    # until the deadline instead (call_soon), so it is never rounded to a millisecond.
    monkeypatch.setattr(_deadline_timer, "_TIMERFD", None)
    delays: list[float] = []

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        call_later = loop.call_later

        def recording(delay: float, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            delays.append(delay)
            return call_later(delay, *args, **kwargs)

        monkeypatch.setattr(loop, "call_later", recording)
        return await _fire_at(time.monotonic_ns() + 200_000)

    assert asyncio.run(scenario()) >= 0
    assert [d for d in delays if d != 10.0] == []  # only _fire_at's hang guard


@pytest.mark.parametrize("timerfd", [True, False])
def test_rearming_replaces_and_disarming_cancels(
    timerfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not timerfd:
        monkeypatch.setattr(_deadline_timer, "_TIMERFD", None)

    async def scenario() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        fired: asyncio.Future[int] = loop.create_future()
        calls: list[int] = []

        def call() -> None:
            calls.append(time.monotonic_ns())
            if not fired.done():
                fired.set_result(calls[-1])

        timer = DeadlineTimer(call)
        start = time.monotonic_ns()
        timer.arm(start + 3600 * 1_000_000_000)  # an hour: no test run lasts that long...
        timer.arm(start + 1_000_000)  # ...so a call at all shows that this replaced it
        first = await asyncio.wait_for(fired, 30)  # 30 s: a hang guard
        timer.arm(time.monotonic_ns() + 1_000_000)
        timer.disarm()
        await asyncio.sleep(0.02)  # well past that deadline, however late the loop wakes
        timer.close()
        return len(calls), first - start, len(calls)

    fired, after_ns, total = asyncio.run(scenario())
    assert fired == 1 and total == 1
    assert after_ns >= 1_000_000
