"""Triton's rate limiter (``--rate-limit execution_count``): instances execute only when the
resources their ``instance_group.rate_limiter`` asks for are free.

Resource capacities come from ``--rate-limit-resource name:count``; a resource the flag does
not name gets the largest count any loaded instance asks for (as Triton does). Waiting
instances are served in order of their ``rate_limiter.priority`` (lower first), then arrival.
Triton uses the priority as a weight (priority 2 gets half the chances of priority 1); strict
ordering is what we do here, which only differs when instances compete for long periods.
Devices are not distinguished: every resource is one pool.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

#: ``--rate-limit`` values
RATE_LIMIT_MODES = ("off", "execution_count")


@dataclass(frozen=True, slots=True)
class Resources:
    """What one instance needs to execute: ``(name, count)`` pairs and its priority."""

    amounts: tuple[tuple[str, int], ...] = ()
    priority: int = 0

    @classmethod
    def of_group(cls, group: ModelInstanceGroup) -> Resources:
        limiter = group.rate_limiter
        amounts = tuple((r.name, int(r.count)) for r in limiter.resources if r.count > 0)
        return cls(amounts, int(limiter.priority))


class RateLimiter:
    """Counts free units of every resource; all methods run on the server loop."""

    def __init__(self, capacities: Mapping[str, int] | None = None) -> None:
        self._explicit = dict(capacities or {})
        self._capacity = dict(self._explicit)
        self._free = dict(self._explicit)
        self._waiters: list[tuple[int, int, Resources, asyncio.Future[None]]] = []
        self._tickets = itertools.count()

    def register(self, needs: Resources) -> None:
        """Make room for an instance's needs (unless the flag fixed the capacity)."""
        for name, count in needs.amounts:
            if name in self._explicit:
                continue
            grown = max(self._capacity.get(name, 0), count)
            self._free[name] = self._free.get(name, 0) + grown - self._capacity.get(name, 0)
            self._capacity[name] = grown

    def _fits(self, needs: Resources) -> bool:
        return all(self._free.get(name, 0) >= count for name, count in needs.amounts)

    def _take(self, needs: Resources) -> None:
        for name, count in needs.amounts:
            self._free[name] -= count

    def try_acquire(self, needs: Resources) -> bool:
        """Hold ``needs`` if it is free now and nobody waits before us; say whether."""
        if not needs.amounts:
            return True
        if not self._waiters and self._fits(needs):
            self._take(needs)
            return True
        return False

    async def acquire(self, needs: Resources) -> None:
        """Wait until every resource in ``needs`` is free, then hold it."""
        if self.try_acquire(needs):
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (needs.priority, next(self._tickets), needs, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(needs)  # granted in the same tick as the cancellation
            raise

    def release(self, needs: Resources) -> None:
        """Give ``needs`` back and grant waiters, best priority first, while they fit."""
        for name, count in needs.amounts:
            self._free[name] = self._free.get(name, 0) + count
        while self._waiters:
            _, _, wanted, future = self._waiters[0]
            if future.done():
                heapq.heappop(self._waiters)
                continue
            if not self._fits(wanted):
                break
            heapq.heappop(self._waiters)
            self._take(wanted)
            future.set_result(None)
