"""Traces of BLS calls side by side: real Triton 2.51 and ours.

``bls_traced`` (``tests/assets/trace_bls_repo``) calls ``add_one`` twice through BLS, once with
``trace=request.trace()`` and once without; ``bls_traced_in_process`` is the same model kept in
the server's process (``WORKBENCH_IN_PROCESS``, a parameter real Triton ignores). Traced with
``--trace-config triton,file=...,level=TIMESTAMPS,rate=1,log-frequency=1``, every request's
file must hold the same traces as real Triton's: the BLS call made with ``trace=`` as a child
(``parent_id``, no ``request_id``, no INFER_RESPONSE_COMPLETE) written before its parent, the
other not at all (``docs/triton-trace-facts.md``, "Streams, generate, BLS and cache hits").
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.peers import REPO_ROOT, Peers, gather_models
from tests.integration.test_conformance_trace import (
    _assert_lived_in_order,
    _http,
    _structure,
)
from tests.integration.trace_cases import Found, run_cases, traced_pair

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

ASSETS = REPO_ROOT / "tests" / "assets"
MODELS = {"add_one": ASSETS / "conformance_repo", "bls_traced": ASSETS / "trace_bls_repo"}
IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'


def _repository(destination: Path) -> Path:
    """The models, and ``bls_traced_in_process``: ``bls_traced`` kept in the server's process."""
    repository = gather_models(MODELS, destination)
    copy = repository / "bls_traced_in_process"
    shutil.copytree(repository / "bls_traced", copy)
    config = copy / "config.pbtxt"
    text = config.read_text().replace('name: "bls_traced"', 'name: "bls_traced_in_process"')
    config.write_text(text + IN_PROCESS)
    return repository


def _post(model: str, request_id: str) -> Callable[..., Any]:
    tensor = {"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
    body: dict[str, Any] = {"inputs": [tensor]}
    if request_id:
        body["id"] = request_id
    return lambda port, address: _http(port, "POST", f"/v2/models/{model}/infer", body)


def _grpc(model: str, request_id: str) -> Callable[..., Any]:
    def call(port: int, address: str) -> Any:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        client = grpcclient.InferenceServerClient(address)
        result = client.infer(model, [tensor], request_id=request_id)
        return result.as_numpy("OUTPUT0").tolist()

    return call


#: (what is traced, the call); each writes the next indexed file
TRACED: list[tuple[str, Callable[..., Any]]] = [
    ("http_stub", _post("bls_traced", "b-1")),
    ("http_stub_without_id", _post("bls_traced", "")),
    ("grpc_stub", _grpc("bls_traced", "b-2")),
    ("http_in_process", _post("bls_traced_in_process", "b-3")),
    ("grpc_in_process", _grpc("bls_traced_in_process", "")),
]


@pytest.fixture(scope="module")
def traced_files(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Found:
    """For each case of TRACED: (file name, its entries, the call's answer) per server."""
    pair = traced_pair(peers, tmp_path_factory.mktemp("trace_bls"), _repository)
    return run_cases(pair, TRACED)


@pytest.mark.parametrize("case", [name for name, _ in TRACED])
def test_trace_file_has_tritons_traces(case: str, traced_files: Found) -> None:
    (real_name, real, real_answer), (our_name, ours, our_answer) = traced_files[case]
    assert our_answer == real_answer
    assert our_name == real_name
    assert _structure(ours) == _structure(real)  # headers (parent_id), timestamp names counted
    assert [e["id"] for e in ours] == [e["id"] for e in real]  # the child's entries first
    _assert_lived_in_order(real)
    _assert_lived_in_order(ours)


def test_only_the_call_made_with_trace_is_a_child_written_first(
    traced_files: Found,
) -> None:
    for case, _ in TRACED:
        caller = "bls_traced_in_process" if "in_process" in case else "bls_traced"
        for _, entries, _ in traced_files[case]:
            parent, child = _structure(entries)["traces"]  # ranked by id
            assert (child["parent"], child["model"][0]) == (parent["trace"], "add_one")
            assert (parent["parent"], parent["model"][0]) == (0, caller)
            assert entries[0].get("parent_id") == entries[-1]["id"]  # the child is written first
            assert child["request_id"] is None
            assert "INFER_RESPONSE_COMPLETE" not in child["timestamps"]
            assert "INFER_RESPONSE_COMPLETE" in parent["timestamps"]
