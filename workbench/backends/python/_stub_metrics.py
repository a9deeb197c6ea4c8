"""Custom metric operations of a stub process, batched on their way to the server.

Triton's stub makes a round trip to the server for every ``increment``. Here an operation only
updates a buffer: increments to one metric add up, a gauge keeps its last value, observations
are listed. The stub sends what is buffered just before each reply (one ``sendall`` with the
reply, see ``Stub._reply``), so a client that has its response finds the metrics its request
updated already on ``/metrics``. Updates made outside ``execute`` (a model's own threads) are
sent by a background thread within ``FLUSH_INTERVAL_S``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from workbench import threads
from workbench.backends.python._server_metrics import Operation

#: how long updates made outside a call may wait before the flusher sends them
FLUSH_INTERVAL_S = 0.05


class MetricForwarder:
    """A ``MetricSink`` that buffers; ``take`` empties the buffer into a list of operations."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: family and metric creations, in order
        self._created: list[Operation] = []
        self._increments: dict[int, float] = {}
        self._sets: dict[int, float] = {}
        self._observed: dict[int, list[float]] = {}
        self._dropped: list[Operation] = []
        self._dirty = threading.Event()
        #: ``_dirty.is_set()`` as a plain attribute, for ``settled`` (read on every reply)
        self._pending = False
        #: held from ``take`` to the end of its send: batches reach the server in order
        self._send_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._stopped = False

    # -- MetricSink ----------------------------------------------------------------------------
    def new_family(self, family_id: int, name: str, description: str, kind: int) -> None:
        self._add_structure(("family", family_id, name, description, kind))

    def new_metric(
        self, metric_id: int, family_id: int, labels: dict[str, str], buckets: list[float] | None
    ) -> None:
        self._add_structure(("metric", metric_id, family_id, labels, buckets))

    def drop_metric(self, metric_id: int) -> None:
        with self._lock:
            self._dropped.append(("drop", metric_id))
        self._pending = True
        self._dirty.set()

    def increment(self, metric_id: int, value: float) -> None:
        with self._lock:
            self._increments[metric_id] = self._increments.get(metric_id, 0.0) + value
        self._mark_dirty()

    def set(self, metric_id: int, value: float) -> None:
        with self._lock:
            self._sets[metric_id] = value
        self._mark_dirty()

    def observe(self, metric_id: int, value: float) -> None:
        with self._lock:
            self._observed.setdefault(metric_id, []).append(value)
        self._mark_dirty()

    def _add_structure(self, operation: Operation) -> None:
        with self._lock:
            self._created.append(operation)
        self._pending = True
        self._dirty.set()

    def _mark_dirty(self) -> None:
        if not self._pending:  # a plain read first: set() takes a lock and notifies
            self._pending = True
            self._dirty.set()

    # -- sending -------------------------------------------------------------------------------
    def take(self) -> list[Operation]:
        """Everything buffered, in an order the registry can apply (creations, values, drops)."""
        with self._lock:
            if not (
                self._created or self._increments or self._sets or self._observed or self._dropped
            ):
                return []
            operations = self._created
            operations += [("increment", m, v) for m, v in self._increments.items()]
            operations += [("set", m, v) for m, v in self._sets.items()]
            operations += [("observe", m, v) for m, v in self._observed.items()]
            operations += self._dropped
            self._created, self._dropped = [], []
            self._increments, self._sets, self._observed = {}, {}, {}
            self._pending = False
            self._dirty.clear()
            return operations

    @property
    def settled(self) -> bool:
        """Nothing buffered and no batch on its way: a reply may go without taking the lock.

        (``take`` clears the flag under the send lock, so "clear and unlocked" means every
        update made so far has been written.)
        """
        return not self._pending and not self._send_lock.locked()

    def send_with(self, send: Callable[[list[Operation]], None]) -> None:
        """Call ``send`` with what is buffered (maybe nothing), before any later batch goes."""
        with self._send_lock:
            send(self.take())

    def start_flusher(self, send: Callable[[list[Operation]], None]) -> None:
        """Send updates made between calls from a daemon thread (``send`` may raise: it stops)."""
        self._flusher = threads.start("metric-flusher", self._flush_forever, send)

    def _flush_forever(self, send: Callable[[list[Operation]], None]) -> None:
        while not self._stopped:
            self._dirty.wait()
            if self._stopped:
                return
            # Let a reply on its way carry them (and more updates gather) before sending.
            time.sleep(FLUSH_INTERVAL_S)
            try:
                self.send_with(lambda operations: send(operations) if operations else None)
            except Exception:  # the server is gone: the stub is ending
                return

    def stop(self) -> None:
        self._stopped = True
        self._dirty.set()
