"""Traces of streams, generate and cache hits side by side: real Triton 2.51 and ours.

The same requests go to both servers (``add_one`` from ``conformance_repo``,
``decoupled_repeat`` and ``cached_add_one`` from ``scheduling_repo``), traced with
``--trace-config triton,file=...,level=TIMESTAMPS,rate=1,log-frequency=1`` so that every
request's trace lands in its own indexed file; each file must have the same name and the same
traces (headers, timestamp names per trace, counted) as real Triton's, as in
``test_conformance_trace.py``. What Triton writes for each case is in
``docs/triton-trace-facts.md`` ("Streams, generate and cache hits").
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.peers import REPO_ROOT, Peers, gather_models
from tests.integration.scheduling_harness import _cache_directory
from tests.integration.test_conformance_trace import (
    _assert_lived_in_order,
    _http,
    _structure,
)
from tests.integration.trace_cases import Found, run_cases, traced_pair

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

ASSETS = REPO_ROOT / "tests" / "assets"
MODELS = {
    "add_one": ASSETS / "conformance_repo",
    "decoupled_repeat": ASSETS / "scheduling_repo",
    "cached_add_one": ASSETS / "scheduling_repo",
}
CACHE_BYTES = 1 << 20


def _pair(peers: Peers, workdir: Path) -> Any:
    """Both servers traced, both with a response cache."""
    caches = _cache_directory(peers, workdir / "caches")
    cache_args = [f"--cache-config=local,size={CACHE_BYTES}", f"--cache-directory={caches}"]
    return traced_pair(
        peers,
        workdir,
        lambda folder: gather_models(MODELS, folder),
        cache_args,
        cache_size=CACHE_BYTES,
    )


def _input(name: str, values: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(
        name, list(values.shape), "FP32" if values.dtype.kind == "f" else "INT32"
    )
    tensor.set_data_from_numpy(values)
    return tensor


def _stream(
    model: str, name: str, values: np.ndarray, answers: int, **options: Any
) -> Callable[..., Any]:
    """One request on a stream of its own; waits for ``answers`` responses, then closes it."""

    def call(port: int, address: str) -> Any:
        got: queue.Queue[Any] = queue.Queue()
        client = grpcclient.InferenceServerClient(address)
        client.start_stream(callback=lambda result, error: got.put(error))
        try:
            client.async_stream_infer(model, [_input(name, values)], **options)
            return [str(got.get(timeout=30)) for _ in range(answers)]
        finally:
            client.stop_stream()

    return call


def _post(model: str, kind: str, body: dict[str, Any]) -> Callable[..., Any]:
    return lambda port, address: _http(port, "POST", f"/v2/models/{model}/{kind}", body)


def _cached(request_id: str) -> Callable[..., Any]:
    tensor = {"name": "IN", "shape": [1, 4], "datatype": "FP32", "data": [1.0] * 4}
    return _post("cached_add_one", "infer", {"id": request_id, "inputs": [tensor]})


def _cached_grpc(port: int, address: str) -> Any:
    client = grpcclient.InferenceServerClient(address)
    client.infer("cached_add_one", [_input("IN", np.ones((1, 4), np.float32))], request_id="c-3")


ZEROS = np.zeros((1, 16), np.float32)
#: (what is traced, the call); each writes the next indexed file
TRACED: list[tuple[str, Callable[..., Any]]] = [
    ("stream_python_model", _stream("add_one", "INPUT0", ZEROS, 1, request_id="s-1")),
    ("stream_decoupled_empty_final", _stream(
        "decoupled_repeat", "COUNT", np.array([3], np.int32), 4, request_id="d-3",
        enable_empty_final_response=True,
    )),
    ("stream_decoupled", _stream("decoupled_repeat", "COUNT", np.array([2], np.int32), 2)),
    ("stream_decoupled_error", _stream(
        "decoupled_repeat", "COUNT", np.array([-1], np.int32), 1, request_id="d-neg"
    )),
    ("generate", _post("add_one", "generate", {"id": "g-1", "INPUT0": [0.0] * 16})),
    ("generate_several_responses", _post("decoupled_repeat", "generate", {"COUNT": [2]})),
    ("generate_refused", _post("add_one", "generate", {"INPUT0": [[0.0] * 16]})),
    ("generate_stream", _post("decoupled_repeat", "generate_stream", {"id": "gs", "COUNT": [3]})),
    ("generate_stream_python_model", _post("add_one", "generate_stream", {"INPUT0": [0.0] * 16})),
    ("cache_miss", _cached("c-1")),
    ("cache_hit", _cached("c-2")),
    ("grpc_cache_hit", _cached_grpc),
]  # fmt: skip


@pytest.fixture(scope="module")
def traced_files(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Found:
    """For each case of TRACED: (file name, its entries, the call's answer) per server."""
    return run_cases(_pair(peers, tmp_path_factory.mktemp("trace_streams")), TRACED)


@pytest.mark.parametrize("case", [name for name, _ in TRACED])
def test_trace_file_has_tritons_traces(case: str, traced_files: Found) -> None:
    (real_name, real, real_answer), (our_name, ours, our_answer) = traced_files[case]
    assert our_answer == real_answer
    assert our_name == real_name
    assert _structure(ours) == _structure(real)  # timestamp names counted
    _assert_lived_in_order(real)
    _assert_lived_in_order(ours)
