"""The local response cache: keys, LRU eviction by size, copies, thread safety."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.core.request import InferRequest
from workbench.core.response_cache import (
    ResponseCache,
    cache_for,
    entry_size,
    request_key,
)


def request(*tensors: Tensor, outputs: list[str] | None = None, **params: object) -> InferRequest:
    return InferRequest(
        model_name="m",
        inputs={t.name: t for t in tensors},
        requested_outputs=outputs,
        parameters=dict(params),
    )


def fp32(name: str, values: list[float], shape: tuple[int, ...] | None = None) -> Tensor:
    array = np.array(values, dtype=np.float32)
    return Tensor(name, "FP32", array.reshape(shape) if shape else array)


def out(nbytes: int, name: str = "OUT") -> list[Tensor]:
    return [Tensor(name, "UINT8", np.zeros(nbytes, np.uint8))]


def test_key_depends_on_model_version_and_every_input() -> None:
    base = request(fp32("A", [1, 2]), fp32("B", [3]))
    key = request_key("m", 1, base)
    # Input order, request id and parameters do not matter (Triton does not hash them).
    swapped = InferRequest("m", id="x", inputs=dict(reversed(base.inputs.items())))
    swapped.parameters["priority"] = 1
    assert request_key("m", 1, swapped) == key
    assert request_key("other", 1, base) != key
    assert request_key("m", 2, base) != key
    assert request_key("m", 1, request(fp32("A", [1, 2]), fp32("B", [4]))) != key
    assert request_key("m", 1, request(fp32("A", [1, 2]), fp32("C", [3]))) != key
    # Same bytes, other shape or datatype: a different request.
    assert request_key("m", 1, request(fp32("A", [1, 2], (1, 2)), fp32("B", [3]))) != key
    as_int = Tensor("B", "INT32", np.array([3.0], np.float32).view(np.int32))
    assert request_key("m", 1, request(fp32("A", [1, 2]), as_int)) != key
    # Asking for other outputs must not be answered with a response to the first question.
    assert request_key("m", 1, request(fp32("A", [1, 2]), fp32("B", [3]), outputs=["X"])) != key


def test_key_of_bytes_and_non_contiguous_inputs() -> None:
    def text(*values: bytes) -> InferRequest:
        array = np.empty(len(values), dtype=object)
        array[:] = list(values)
        return request(Tensor("T", "BYTES", array))

    assert request_key("m", 1, text(b"ab", b"c")) != request_key("m", 1, text(b"a", b"bc"))
    assert request_key("m", 1, text(b"ab")) == request_key("m", 1, text(b"ab"))
    matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
    strided = request(Tensor("A", "FP32", matrix.T))
    copied = request(Tensor("A", "FP32", np.ascontiguousarray(matrix.T)))
    assert request_key("m", 1, strided) == request_key("m", 1, copied)


def test_lookup_and_insert_store_and_return_copies() -> None:
    cache = ResponseCache(1 << 20)
    outputs = [fp32("OUT", [1, 2, 3])]
    assert cache.lookup("k") is None
    assert cache.insert("k", outputs) is True
    outputs[0].array[:] = 0  # the model's buffer is reused: the cache must not see it
    first = cache.lookup("k")
    assert first is not None and first[0].array.tolist() == [1, 2, 3]
    first[0].array[:] = 9
    first[0].parameters["changed"] = True
    second = cache.lookup("k")
    assert second is not None and second[0].array.tolist() == [1, 2, 3]
    assert second[0].parameters == {} and second[0].name == "OUT"
    assert cache.insert("k", outputs) is None  # already present
    assert (cache.counters.hits, cache.counters.misses, cache.counters.lookups) == (2, 1, 3)


def test_lru_eviction_by_bytes() -> None:
    size = entry_size(out(100))
    cache = ResponseCache(3 * size)
    for key in "abc":
        assert cache.insert(key, out(100))
    assert cache.used_bytes == 3 * size and len(cache) == 3
    assert cache.lookup("a") is not None  # "a" is now the most recently used
    assert cache.insert("d", out(100))
    assert cache.lookup("b") is None and cache.lookup("a") is not None
    # A large entry evicts as many least recently used entries as it needs.
    assert cache.insert("big", out(2 * size))
    assert len(cache) == 1 and cache.lookup("big") is not None
    assert cache.used_bytes <= cache.size_bytes and cache.counters.evictions == 1 + 3


def test_entries_larger_than_the_cache_are_skipped() -> None:
    cache = ResponseCache(1000)
    assert cache.insert("small", out(10))
    assert cache.insert("huge", out(2000)) is False
    assert cache.lookup("huge") is None and cache.lookup("small") is not None


def test_entry_size_counts_bytes_elements_with_length_prefixes() -> None:
    array = np.empty(2, dtype=object)
    array[:] = [b"abc", b""]
    text = entry_size([Tensor("T", "BYTES", array)])
    empty = entry_size([Tensor("T", "BYTES", np.empty(0, dtype=object))])
    assert text - empty == (4 + 3) + (4 + 0) + 0  # same ndim, so the same header


def test_request_api_reports_durations_for_statistics() -> None:
    cache = ResponseCache(1 << 20)
    req = request(fp32("A", [1]))
    miss = cache.lookup_request("m", 1, req)
    assert not miss.hit and miss.outputs is None and miss.lookup_ns >= 0 and miss.started_ns > 0
    miss_ns = cache.insert_response(miss, [fp32("OUT", [2])])
    assert miss_ns is not None and miss_ns >= miss.lookup_ns
    hit = cache.lookup_request("m", 1, request(fp32("A", [1])))
    assert hit.hit and hit.key == miss.key and hit.outputs is not None
    assert hit.outputs[0].array.tolist() == [2]
    # A second miss for the same key (a concurrent duplicate) is not counted by Triton.
    assert cache.insert_response(miss, [fp32("OUT", [2])]) is None


def test_cache_for_needs_both_the_server_cache_and_the_model_flag() -> None:
    enabled = text_format.Parse("response_cache { enable: true }", ModelConfig())
    cache = ResponseCache(1024)
    assert cache_for(enabled, cache) is cache
    assert cache_for(ModelConfig(), cache) is None
    assert cache_for(enabled, None) is None
    with pytest.raises(ValueError):
        ResponseCache(0)


def test_thread_safety_under_concurrent_use() -> None:
    size = entry_size(out(64))
    cache = ResponseCache(8 * size)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for i in range(300):
                key = f"k{(seed * 7 + i) % 20}"
                found = cache.lookup(key)
                if found is None:
                    cache.insert(key, out(64))
                else:
                    assert found[0].array.nbytes == 64
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    assert len(cache) <= 8 and cache.used_bytes == len(cache) * size
    counters = cache.counters
    assert counters.lookups == 6 * 300 == counters.hits + counters.misses
