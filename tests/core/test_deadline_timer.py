"""The microsecond loop timer behind sub-millisecond queue delays (timerfd, and the fallback)."""

from __future__ import annotations

import asyncio
import time

import pytest

from workbench.core import _deadline_timer
from workbench.core._deadline_timer import DeadlineTimer


async def _fire_after(delay_ns: int) -> int:
    """Arm a timer ``delay_ns`` ahead; how late (ns) its call came."""
    fired = asyncio.get_running_loop().create_future()
    timer = DeadlineTimer(lambda: fired.done() or fired.set_result(time.monotonic_ns()))
    deadline = time.monotonic_ns() + delay_ns
    timer.arm(deadline)
    try:
        return await asyncio.wait_for(fired, 1.0) - deadline
    finally:
        timer.close()


@pytest.mark.parametrize("timerfd", [True, False])
def test_a_sub_millisecond_deadline_is_kept(timerfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not timerfd:
        monkeypatch.setattr(_deadline_timer, "_TIMERFD", None)
    late_ns = asyncio.run(_fire_after(200_000))
    assert 0 <= late_ns < 5_000_000  # never early; well under a loop timer's millisecond


@pytest.mark.parametrize("timerfd", [True, False])
def test_rearming_replaces_and_disarming_cancels(
    timerfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not timerfd:
        monkeypatch.setattr(_deadline_timer, "_TIMERFD", None)

    async def scenario() -> list[int]:
        calls: list[int] = []
        timer = DeadlineTimer(lambda: calls.append(time.monotonic_ns()))
        start = time.monotonic_ns()
        timer.arm(start + 50_000_000)
        timer.arm(start + 1_000_000)  # replaces the later one
        await asyncio.sleep(0.1)
        fired = list(calls)
        timer.arm(time.monotonic_ns() + 1_000_000)
        timer.disarm()
        await asyncio.sleep(0.02)
        timer.close()
        return [len(fired), len(calls), fired[0] - start if fired else -1]

    fired, total, after_ns = asyncio.run(scenario())
    assert fired == 1 and total == 1
    assert 1_000_000 <= after_ns < 50_000_000
