"""After a very large gRPC request the C heap is trimmed (benchmarks/large_message_memory.py:
without it the server stayed hundreds of MiB above its baseline after a 1 GiB request)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.peers import copy_repository
from workbench.server.grpc import _trim, service
from workbench.server.hosting import Server

CONFORMANCE_REPO = Path(__file__).resolve().parents[2] / "assets" / "conformance_repo"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[grpcclient.InferenceServerClient]:
    repo = copy_repository(CONFORMANCE_REPO, tmp_path / "repo")
    options = {"model_control_mode": "explicit", "load_model": ["identity_all"]}
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0, **options) as server:
        assert server.grpc_url is not None
        limits = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        yield grpcclient.InferenceServerClient(server.grpc_url, channel_args=limits)


def _echo(client: grpcclient.InferenceServerClient, size: int) -> None:
    tensor = grpcclient.InferInput("IN_UINT8", [1, size], "UINT8")
    tensor.set_data_from_numpy(np.ones((1, size), np.uint8))
    echo = client.infer("identity_all", [tensor]).as_numpy("OUT_UINT8")
    assert echo is not None and echo.nbytes == size


def test_a_trim_follows_only_very_large_requests(
    client: grpcclient.InferenceServerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(service, "trim_after_reply", lambda: calls.append("trim"))
    _echo(client, 1 << 20)
    assert calls == []
    _echo(client, _trim.TRIM_AFTER_BYTES)
    assert calls == ["trim"]


def test_glibc_malloc_trim_is_found_here() -> None:
    assert _trim._malloc_trim() is not None  # noqa: SLF001 - Linux with glibc, as CI
