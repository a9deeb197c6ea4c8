"""Decoupled BLS (``exec(decoupled=True)``, ``async_exec(decoupled=True)``) side by side.

``bls_caller`` (tests/assets/decoupled_bls_repo) calls the decoupled ``repeat`` model every way
a python model can and reports what it saw; the report must be the same on real tritonserver
2.51 and on the embedded server, with the caller in a stub process and in-process (whose BLS
goes straight to the core's client). What the reports hold, as Triton answered:

- every response in order, the last one empty when the final flag came alone;
- a finished iterator iterated again from its first response;
- ``exec()`` without ``decoupled=True`` on a decoupled model, an unknown model and a bad input
  as INTERNAL "Model <m> - Error when running inference: ..."; a model's own error as it sent it;
- a model name given as bytes; an iterator abandoned after one response; two ``async_exec``
  calls gathered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.peers import Peers, TritonServerProcess, copy_repository
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

REPOSITORY = Path(__file__).resolve().parents[2] / "assets" / "decoupled_bls_repo"
IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'
#: (responses asked of ``repeat``, whether its last response carries the final flag)
CASES = [(3, 0), (3, 1), (0, 0), (-1, 0)]


@pytest.fixture(scope="module")
def urls(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """HTTP ``host:port`` of real Triton, ours, and ours with ``bls_caller`` in-process."""
    workdir = tmp_path_factory.mktemp("decoupled_bls")
    in_process = copy_repository(REPOSITORY, workdir / "in_process")
    config = in_process / "bls_caller" / "config.pbtxt"
    config.write_text(config.read_text() + IN_PROCESS)
    triton = TritonServerProcess(
        peers, copy_repository(REPOSITORY, workdir / "triton"), log_path=workdir / "triton.log"
    )
    ours = Server(
        copy_repository(REPOSITORY, workdir / "ours"), http_port=0, grpc_port=0, metrics_port=0
    )
    ours_in_process = Server(in_process, http_port=0, grpc_port=0, metrics_port=0)
    with triton, ours, ours_in_process:
        yield {
            "triton": triton.http_url,
            "ours": ours.url.removeprefix("http://"),
            "ours_in_process": ours_in_process.url.removeprefix("http://"),
        }


def _report(url: str, count: int, last_with_data: int) -> dict[str, Any]:
    client = httpclient.InferenceServerClient(url)
    inputs = []
    for name, value in (("IN", count), ("LAST_WITH_DATA", last_with_data)):
        tensor = httpclient.InferInput(name, [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
        inputs.append(tensor)
    result = client.infer("bls_caller", inputs)
    report: dict[str, Any] = json.loads(result.as_numpy("REPORT")[0])
    return report


@pytest.mark.parametrize("server", ["ours", "ours_in_process"])
@pytest.mark.parametrize(("count", "last_with_data"), CASES)
def test_decoupled_bls_sees_what_triton_shows(
    urls: dict[str, str], server: str, count: int, last_with_data: int
) -> None:
    expected = _report(urls["triton"], count, last_with_data)
    ours = _report(urls[server], count, last_with_data)
    # Two gathered ``async_exec`` calls: ours must both yield the whole stream. Triton 2.51
    # sometimes hands one of them an empty iterator when the model answers with an error
    # (a race in its python backend, seen in CI for count -1), so its entry is checked to be
    # the stream or nothing rather than compared as a whole.
    assert ours.pop("async") == [ours["stream"], ours["stream"]]
    assert all(seen in (expected["stream"], []) for seen in expected.pop("async"))
    assert ours == expected


def test_the_reports_hold_what_triton_answered(urls: dict[str, str]) -> None:
    """A check on the side-by-side test itself: Triton's report says what the docstring says."""
    report = _report(urls["triton"], 2, 0)
    assert report["type"] == "ResponseIterator"
    assert [r["outputs"] for r in report["stream"]] == [{"OUT": [0]}, {"OUT": [1]}, {}]
    assert report["again"] == report["stream"] and report["bytes_name"] == report["stream"]
    assert report["async"] == [report["stream"], report["stream"]]
    assert report["first"] == report["stream"][:1]
    [single] = report["single"]
    assert single["error"][1] == ["INTERNAL"]
    assert single["error"][0].startswith("Model repeat - Error when running inference: ")
    [missing] = report["missing"]
    assert "Model 'nope' is not ready." in missing["error"][0]
    failed = _report(urls["triton"], -1, 0)["stream"]
    assert failed == [{"error": ["negative count", ["INTERNAL"]], "outputs": {}}]
