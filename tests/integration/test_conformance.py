"""Side by side: the same requests to real Triton 2.51 and to the embedded server.

The cases are the ones ``capture_golden.py`` records (see tests/assets/conformance_golden/).
Status codes must be identical; bodies identical after removing what varies by run
(timings, timestamps) and what is documented below as a deliberate difference.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.capture_golden import Case, error_cases, metadata_cases, ok_cases, send
from tests.integration.peers import TritonServerProcess
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

#: Error messages that legitimately differ (the status code must still match):
#: - the JSON parser's own wording (rapidjson in Triton, Python's json here);
#: - a Python traceback's frames ("At: ...") which differ by interpreter.
LOOSE_MESSAGES = {
    "error_infer_malformed_json": "failed to parse the request JSON buffer",
}
#: Messages that name a file of the repository: equal once each server's root is masked.
ROOTED_MESSAGES = {"error_infer_fails_on_nan_raises"}


def _port(server: Server | TritonServerProcess) -> int:
    return server.http_port


def _strip_volatile(body: Any) -> Any:
    """Drop values that differ on every run (durations, timestamps)."""
    if isinstance(body, dict):
        return {
            k: (0 if k in ("ns", "last_inference") else _strip_volatile(v)) for k, v in body.items()
        }
    if isinstance(body, list):
        return [_strip_volatile(v) for v in body]
    return body


def _compare(case: Case, real: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours["status"] == real["status"], (
        f"{case.name}: status {ours['status']} != Triton's {real['status']}; "
        f"ours: {ours['body']!r}; Triton: {real['body']!r}"
    )
    if case.name in LOOSE_MESSAGES:
        assert LOOSE_MESSAGES[case.name] in ours["body"]["error"], ours["body"]
        return
    assert _strip_volatile(ours["body"]) == _strip_volatile(real["body"]), case.name


def _masked(body: dict[str, Any], root: Any) -> dict[str, Any]:
    """``body`` with the server's repository folder written ``<repo>``."""
    folder = str(Path(str(root)).resolve())
    return {k: v.replace(folder, "<repo>") if isinstance(v, str) else v for k, v in body.items()}


#: Deliberate difference: server_metadata lists only the extensions we implement
#: (perf_analyzer reads this list), so "cuda_shared_memory" is absent on a machine without GPUs.
#: Tracing is compared in depth in test_conformance_trace.py; its GET cases run here too.


def test_extensions_are_a_subset_of_tritons(
    real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    case = Case("server_metadata", "GET", "/v2")
    real, ours = send(_port(real_triton), case)["body"], send(_port(embedded_server), case)["body"]
    assert (ours["name"], ours["version"]) == (real["name"], real["version"])
    assert [e for e in real["extensions"] if e in ours["extensions"]] == ours["extensions"]
    assert {"statistics", "binary_tensor_data", "model_repository", "trace"} <= set(
        ours["extensions"]
    )


CASES = {case.name: case for case in ok_cases() + metadata_cases() + error_cases()}
#: stats depend on the order of earlier cases; checked separately below.
ORDER_DEPENDENT = {"model_stats_add_one_after_one_infer", "model_stats_all"}
SEPARATE = ORDER_DEPENDENT | {"server_metadata"}


@pytest.mark.parametrize("name", sorted(set(CASES) - SEPARATE))
def test_same_answer_as_real_triton(
    name: str, real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    case = CASES[name]
    real, ours = send(_port(real_triton), case), send(_port(embedded_server), case)
    if name in ROOTED_MESSAGES:
        real["body"] = _masked(real["body"], real_triton.model_repository)
        ours["body"] = _masked(ours["body"], embedded_server.model_repository)
    _compare(case, real, ours)


def test_statistics_have_tritons_shape(
    real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    infer = CASES["infer_add_one_json"]
    stats = Case("stats", "GET", "/v2/models/add_one/stats")
    shapes = []
    for server in (real_triton, embedded_server):
        send(_port(server), infer)
        body = send(_port(server), stats)["body"]
        entry = body["model_stats"][0]
        assert entry["inference_count"] >= 1 and entry["execution_count"] >= 1
        shapes.append(_keys(body))
    assert shapes[0] == shapes[1]


def test_unload_and_reload_like_real_triton(
    real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    """The repository API round trip (index after unload, infer on an unloaded model)."""
    unload = Case("unload", "POST", "/v2/repository/models/echo_bytes/unload", b"")
    load = Case("load", "POST", "/v2/repository/models/echo_bytes/load", b"")
    index = Case("index", "POST", "/v2/repository/index", b"")
    infer = Case(
        "infer",
        "POST",
        "/v2/models/echo_bytes/infer",
        {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "BYTES", "data": ["ab"]}]},
    )
    answers = []
    for server in (real_triton, embedded_server):
        port = _port(server)
        steps = [send(port, unload)]
        deadline = time.monotonic() + 10
        while any(e.get("state") == "UNLOADING" for e in send(port, index)["body"]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        steps += [send(port, index), send(port, infer), send(port, load), send(port, infer)]
        answers.append([(s["status"], s["body"]) for s in steps])
    assert answers[1] == answers[0]


def _keys(body: Any) -> Any:
    if isinstance(body, dict):
        return {k: _keys(v) for k, v in body.items() if k != "batch_stats"}
    if isinstance(body, list):
        return [_keys(v) for v in body[:1]]
    return type(body).__name__


def test_tritonclient_outputs_identical(
    real_triton: TritonServerProcess, embedded_server: Server
) -> None:
    """Every dtype through tritonclient.http, JSON and binary, on both servers."""
    import tritonclient.http as httpclient

    results = []
    for server in (real_triton, embedded_server):
        client = httpclient.InferenceServerClient(f"127.0.0.1:{_port(server)}")
        try:
            results.append(_identity_all(client, httpclient))
        finally:
            client.close()
    for name, real in results[0].items():
        ours = results[1][name]
        assert ours.dtype == real.dtype and ours.shape == real.shape, name
        np.testing.assert_array_equal(ours, real, err_msg=name)


def _identity_all(client: Any, httpclient: Any) -> dict[str, np.ndarray]:
    metadata = client.get_model_metadata("identity_all")
    inputs, arrays = [], {}
    rng = np.random.default_rng(7)
    for spec in metadata["inputs"]:
        array = _sample(spec["datatype"], rng)
        tensor = httpclient.InferInput(spec["name"], list(array.shape), spec["datatype"])
        tensor.set_data_from_numpy(array, binary_data=spec["datatype"] != "FP64")
        inputs.append(tensor)
        arrays[spec["name"]] = array
    outputs = [  # FP16 has no JSON form (Triton answers 400), so it is always binary
        httpclient.InferRequestedOutput(o["name"], binary_data=i % 2 == 0 or "FP16" in o["name"])
        for i, o in enumerate(metadata["outputs"])
    ]
    result = client.infer("identity_all", inputs, outputs=outputs)
    return {o["name"]: result.as_numpy(o["name"]) for o in metadata["outputs"]}


def _sample(datatype: str, rng: np.random.Generator) -> np.ndarray:
    if datatype == "BYTES":
        return np.array([[b"alpha", "\u00e9t\u00e9".encode(), b""]], dtype=np.object_)
    if datatype == "BOOL":
        return np.array([[True, False, True]])
    from tritonclient.utils import triton_to_np_dtype

    dtype = np.dtype(triton_to_np_dtype(datatype))
    return (rng.random((1, 3)) * 100).astype(dtype)
