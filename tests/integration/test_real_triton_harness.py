"""The harness itself: real Triton starts, serves the conformance models, and perf_analyzer runs."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.integration.peers import TRITON_VERSION, Peers, TritonServerProcess, run_perf_analyzer

pytestmark = [pytest.mark.integration, pytest.mark.conformance]


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def test_real_triton_is_ready_and_lists_statistics(real_triton: TritonServerProcess) -> None:
    with urllib.request.urlopen(f"http://{real_triton.http_url}/v2/health/ready") as response:
        assert response.status == 200
    metadata = _get_json(f"http://{real_triton.http_url}/v2")
    assert isinstance(metadata, dict)
    assert metadata["version"] == TRITON_VERSION
    assert "statistics" in metadata["extensions"]


def test_add_one_via_tritonclient_http(real_triton: TritonServerProcess) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(real_triton.http_url)
    try:
        x = np.arange(32, dtype=np.float32).reshape(2, 16)
        infer_input = httpclient.InferInput("INPUT0", list(x.shape), "FP32")
        infer_input.set_data_from_numpy(x)
        result = client.infer("add_one", [infer_input])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x + 1)
    finally:
        client.close()


@pytest.mark.slow
def test_perf_analyzer_reports_server_side_stats(
    real_triton: TritonServerProcess, peers: Peers, perf_analyzer: Path
) -> None:
    returncode, output = run_perf_analyzer(
        "add_one",
        real_triton.http_url,
        measurement_ms=500,
        extra_args=["--stability-percentage=50", "--max-trials=10"],
        peers=peers,
        timeout_s=120,
    )
    assert returncode == 0, output
    assert "Server:" in output, output
    assert "Throughput:" in output, output
