"""The server's exit deadline: unset while serving, it bounds waits once the exit begins and
ends what its instances registered when it expires (docs/shutdown-facts.md)."""

from __future__ import annotations

import gc
import weakref

from workbench.backends.exit_deadline import ExitDeadline


class FakeStub:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def end(self, reason: str) -> None:
        self.reasons.append(reason)


def test_waits_keep_their_own_bound_until_the_exit_begins() -> None:
    deadline = ExitDeadline()
    assert deadline.remaining(30.0) == 30.0 and not deadline.passed()


def test_once_the_exit_begins_no_wait_outlasts_it() -> None:
    deadline = ExitDeadline()
    deadline.start(3600.0)
    assert deadline.remaining(5.0) == 5.0
    assert 0.0 < deadline.remaining(7200.0) <= 3600.0 and not deadline.passed()


def test_a_deadline_already_set_is_kept() -> None:
    deadline = ExitDeadline()
    deadline.start(0.0)
    deadline.start(3600.0)
    assert deadline.remaining(5.0) == 0.0 and deadline.passed()


def test_expiry_ends_every_watched_process_once() -> None:
    deadline, stubs = ExitDeadline(), [FakeStub(), FakeStub()]
    for stub in stubs:
        deadline.watch(stub)
    deadline.expire("the exit timeout expired")
    deadline.expire("again")
    assert [s.reasons for s in stubs] == [["the exit timeout expired"]] * 2


def test_a_process_watched_after_expiry_is_ended_at_once() -> None:
    deadline, late = ExitDeadline(), FakeStub()
    deadline.expire("the exit timeout expired")
    deadline.watch(late)
    assert late.reasons == ["the exit timeout expired"]


def test_processes_are_held_weakly() -> None:
    deadline, stub = ExitDeadline(), FakeStub()
    deadline.watch(stub)
    collected = weakref.ref(stub)
    del stub
    gc.collect()
    assert collected() is None
    deadline.expire("nothing left to end")
