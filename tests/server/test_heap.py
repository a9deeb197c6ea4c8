"""The server's C heap: after a very large gRPC request it is trimmed
(benchmarks/large_message_memory.py: without it the server stayed hundreds of MiB above its
baseline after a 1 GiB request); a serving process has malloc's thresholds set for tensors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.peers import copy_repository
from workbench.server import heap
from workbench.server.grpc import service
from workbench.server.hosting import Server

CONFORMANCE_REPO = Path(__file__).resolve().parents[1] / "assets" / "conformance_repo"


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
    _echo(client, heap.TRIM_AFTER_BYTES)
    assert calls == ["trim"]


def test_glibc_malloc_trim_is_found_here() -> None:
    assert heap._malloc_trim() is not None  # noqa: SLF001 - Linux with glibc, as CI


def test_a_serving_server_tunes_the_heap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(heap, "tune", lambda: calls.append("tune"))
    repo = copy_repository(CONFORMANCE_REPO, tmp_path / "repo")
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0, model_control_mode="explicit"):
        assert calls == ["tune"]


_MAPPED_BLOCKS = """
import ctypes, sys
from workbench.server import heap

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

mallinfo2 = heap._libc().mallinfo2
mallinfo2.restype = Info
if sys.argv[1] == "tuned":
    assert heap.tune()
before = mallinfo2().hblks
block = bytearray(1 << 20)  # a 1 MiB tensor
print(mallinfo2().hblks - before)
"""


@pytest.mark.parametrize(("mode", "mapped"), [("default", "1"), ("tuned", "0")])
def test_tuned_a_1_mib_block_comes_from_the_heap_not_a_fresh_mapping(
    mode: str, mapped: str
) -> None:
    # in a fresh interpreter: the test process's heap may be tuned already (by a Server)
    found = subprocess.run(
        [sys.executable, "-c", _MAPPED_BLOCKS, mode],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert found.stdout.split() == [mapped]
