"""The server's exit deadline, shared with every model instance the server creates.

tritonserver spends one ``--exit-timeout-secs`` budget on the whole exit (HTTP connections,
in-flight inferences, then live models: ``InferenceServer::Stop`` in core ``src/server.cc``),
then exits whatever still runs; its stubs notice their parent is gone and end
(docs/shutdown-facts.md). Here the core starts this deadline when the exit begins; an
instance's ``close`` waits for ``finalize`` no longer than it allows, and once it has passed
``expire`` ends every process an instance registered, so that nothing outlives the server.
Each server has its own deadline: a notebook may host several servers, and one's exit must
not end another's stubs.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Protocol


class Endable(Protocol):
    """A process that can be ended at once (a python model's stub)."""

    def end(self, reason: str) -> None:
        """Kill it now and log ``reason``; it must not be started again."""
        ...


class ExitDeadline:
    """Unset while serving; ``start`` sets it when the exit begins, ``expire`` ends what runs."""

    def __init__(self) -> None:
        self._at: float | None = None
        self._expired: str | None = None
        self._lock = threading.Lock()
        self._watched: weakref.WeakSet[Endable] = weakref.WeakSet()

    def start(self, timeout_s: float) -> None:
        """The exit begins: every wait from now on ends ``timeout_s`` from now at the latest."""
        with self._lock:
            if self._at is None:
                self._at = time.monotonic() + max(timeout_s, 0.0)

    def remaining(self, limit_s: float) -> float:
        """How long a wait may last now: ``limit_s``, or less once the exit has begun."""
        at = self._at
        if at is None:
            return limit_s
        return max(0.0, min(limit_s, at - time.monotonic()))

    def passed(self) -> bool:
        """Whether the exit has begun and its time is up."""
        at = self._at
        return at is not None and time.monotonic() >= at

    def watch(self, process: Endable) -> None:
        """End ``process`` when the deadline expires (held weakly; ended now if it has)."""
        with self._lock:
            reason = self._expired
            if reason is None:
                self._watched.add(process)
        if reason is not None:
            process.end(reason)

    def expire(self, reason: str) -> None:
        """The exit ran out of time: end every watched process still running."""
        with self._lock:
            self._expired = reason
            processes = list(self._watched)
            self._watched.clear()
        for process in processes:
            process.end(reason)


__all__ = ["Endable", "ExitDeadline"]
