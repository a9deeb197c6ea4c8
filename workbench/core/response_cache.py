"""Triton's ``local`` response cache: one per server, shared by every model that enables it.

A model uses it when its config says ``response_cache { enable: true }`` and the server was
started with ``--cache-config local,size=N``. Entries are keyed by a hash of the model name,
the version that runs and every input (name, datatype, shape, bytes), and evicted least
recently used first when the bytes they hold would exceed ``N``; an entry larger than the
whole cache is not stored. Entries hold copies of the outputs, and hits hand out copies.

Two deliberate differences from Triton, which hashes only input names and bytes: the datatype
and shape are part of the key (same bytes, other shape: a different request), and so are the
requested outputs (Triton would answer a request for all outputs with a cached response to a
request for one of them).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.core.request import InferRequest

#: Bytes an entry costs besides its tensor data (Triton serialises a small header per output).
_ENTRY_OVERHEAD = 16
_OUTPUT_OVERHEAD = 16


@dataclass(slots=True)
class CacheLookup:
    """The outcome of looking a request up; keep it to insert the response after a miss."""

    key: str
    #: copies of the cached outputs on a hit, ``None`` on a miss
    outputs: list[Tensor] | None
    #: how long the lookup took (Triton's ``cache_hit.ns`` on a hit)
    lookup_ns: int
    #: ``time.monotonic_ns()`` when the lookup began (on a hit, the end of the queue time)
    started_ns: int

    @property
    def hit(self) -> bool:
        return self.outputs is not None


@dataclass(slots=True)
class _Entry:
    outputs: list[Tensor]
    size: int


@dataclass(slots=True)
class CacheCounters:
    """Server-wide counters (what Triton's ``nv_cache_*`` metrics report)."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    insertions: int = 0
    evictions: int = 0
    lookup_ns: int = 0
    insertion_ns: int = 0


class ResponseCache:
    """A thread-safe LRU map from request hashes to output tensors, bounded in bytes."""

    def __init__(self, size_bytes: int) -> None:
        if size_bytes <= 0:
            raise ValueError("the response cache needs a positive size in bytes")
        self.size_bytes = size_bytes
        self.used_bytes = 0
        self.counters = CacheCounters()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    # -- what models call ----------------------------------------------------------------------
    def lookup_request(self, model_name: str, version: int, request: InferRequest) -> CacheLookup:
        """Hash ``request`` and look it up (a version is the one that runs, never "")."""
        key = request_key(model_name, version, request)
        started = time.monotonic_ns()
        outputs = self.lookup(key)
        return CacheLookup(key, outputs, time.monotonic_ns() - started, started)

    def insert_response(self, lookup: CacheLookup, outputs: Sequence[Tensor]) -> int | None:
        """Store the outputs of a successful execution after a miss.

        Returns the nanoseconds to record as Triton's ``cache_miss`` (lookup + insertion), or
        ``None`` when another request stored the key first (Triton does not count that miss).
        """
        started = time.monotonic_ns()
        inserted = self.insert(lookup.key, outputs)
        if inserted is None:
            return None
        return lookup.lookup_ns + time.monotonic_ns() - started

    # -- the map -------------------------------------------------------------------------------
    def lookup(self, key: str) -> list[Tensor] | None:
        """Copies of the outputs stored under ``key`` (marking it recently used), or ``None``."""
        started = time.monotonic_ns()
        with self._lock:
            entry = self._entries.get(key)
            self.counters.lookups += 1
            if entry is None:
                self.counters.misses += 1
            else:
                self.counters.hits += 1
                self._entries.move_to_end(key)
            self.counters.lookup_ns += time.monotonic_ns() - started
        return None if entry is None else [_copy(t) for t in entry.outputs]

    def insert(self, key: str, outputs: Sequence[Tensor]) -> bool | None:
        """Store copies of ``outputs``, evicting least recently used entries to make room.

        Returns True when stored, False when the entry is larger than the whole cache (not
        stored, as Triton's local cache refuses it), ``None`` when ``key`` is already present.
        """
        started = time.monotonic_ns()
        with self._lock:
            present = key in self._entries
        if present:
            return None
        copies = [_copy(t) for t in outputs]  # outside the lock: may be large
        size = entry_size(copies)
        with self._lock:
            try:
                if key in self._entries:
                    return None
                if size > self.size_bytes:
                    return False
                while self.used_bytes + size > self.size_bytes:
                    _, evicted = self._entries.popitem(last=False)
                    self.used_bytes -= evicted.size
                    self.counters.evictions += 1
                self._entries[key] = _Entry(copies, size)
                self.used_bytes += size
                self.counters.insertions += 1
                return True
            finally:
                self.counters.insertion_ns += time.monotonic_ns() - started


def cache_for(config: ModelConfig, cache: ResponseCache | None) -> ResponseCache | None:
    """The cache a model uses: the server's, when its config enables the response cache."""
    return cache if cache is not None and config.response_cache.enable else None


def request_key(model_name: str, version: int, request: InferRequest) -> str:
    """A 128-bit hash of the model, its version, the inputs and the requested outputs."""
    digest = hashlib.blake2b(digest_size=16)
    _add_text(digest, model_name)
    digest.update(int(version).to_bytes(8, "little", signed=True))
    for name in sorted(request.inputs):
        tensor = request.inputs[name]
        _add_text(digest, name)
        _add_text(digest, tensor.datatype)
        _add_text(digest, ",".join(str(d) for d in tensor.shape))
        _add_data(digest, tensor)
    requested = request.requested_outputs
    _add_text(digest, "*" if requested is None else "\0".join(requested))
    return digest.hexdigest()


def entry_size(outputs: Sequence[Tensor]) -> int:
    """Bytes an entry takes: tensor data (BYTES with 4-byte length prefixes) and headers."""
    total = _ENTRY_OVERHEAD
    for tensor in outputs:
        total += _OUTPUT_OVERHEAD + len(tensor.name) + len(tensor.datatype) + 8 * tensor.array.ndim
        if tensor.datatype == "BYTES":
            total += sum(4 + len(_as_bytes(v)) for v in tensor.array.flat)
        else:
            total += tensor.array.nbytes
    return total


def _add_text(digest: Any, text: str) -> None:
    raw = text.encode()
    digest.update(len(raw).to_bytes(8, "little"))
    digest.update(raw)


def _add_data(digest: Any, tensor: Tensor) -> None:
    if tensor.datatype == "BYTES":
        for value in tensor.array.flat:
            raw = _as_bytes(value)
            digest.update(len(raw).to_bytes(4, "little"))
            digest.update(raw)
        return
    # ascontiguousarray is at least 1-D; a uint8 view hashes the raw bytes without a copy.
    digest.update(np.ascontiguousarray(tensor.array).view(np.uint8))


def _as_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)  # type: ignore[call-overload]


def _copy(tensor: Tensor) -> Tensor:
    return Tensor(
        name=tensor.name,
        datatype=tensor.datatype,
        array=tensor.array.copy(),
        parameters=dict(tensor.parameters),
    )


__all__ = ["CacheCounters", "CacheLookup", "ResponseCache", "cache_for", "entry_size"]
