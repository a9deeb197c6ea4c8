"""16 MiB in, 16 MiB out at concurrency 1: HTTP binary, gRPC and system shared memory, real
Triton 2.51 vs workbench, one run.

Each server (one at a time, each in its own process) serves ``identity_all`` from
``tests/assets/conformance_repo`` (Python backend: the tensor crosses to the stub process and
back). A request carries ``IN_FP32[1, 4Mi]`` (16 MiB) and asks for ``OUT_FP32``, its echo, with
``tritonclient``:

- ``http``: the binary tensor extension, input and output;
- ``grpc``: raw contents;
- ``shm http`` / ``shm grpc``: the input written into a registered system shared-memory region
  before each request (``tritonclient.utils.shared_memory``), the output asked for in another
  region and read there (a view, as a client reads it); the request itself is a few hundred
  bytes of JSON or protobuf.

Each path runs ``--warmup`` requests, then ``--requests`` timed ones back to back. MB/s counts
both directions (32 MiB per request, 1 MB = 10^6 bytes). Ratios: shared memory over HTTP binary
for each server, and workbench over Triton for each path.

    python benchmarks/shared_memory.py --requests 20

Not a test: it needs the real peers (``python -m tests.integration.peers prepare``) and
``setuptools<81`` (tritonclient's shared-memory utilities import ``pkg_resources``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _harness import (
    REPO_ROOT,
    TRITON,
    WORKBENCH,
    machine_info,
    markdown_table,
    ratio,
    results_path,
    workbench_server,
    write_report,
)

from tests.integration.peers import TritonServerProcess, copy_repository, prepare

with warnings.catch_warnings():  # "pkg_resources is deprecated", from tritonclient's import
    warnings.simplefilter("ignore")
    import tritonclient.utils.shared_memory as shm

MODEL = "identity_all"
ELEMENTS = 4 * 1024 * 1024  # FP32: 16 MiB
BYTES = ELEMENTS * 4
PATHS = ("http", "grpc", "shm http", "shm grpc")


def _clients(urls: dict[str, str]) -> dict[str, Any]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    return {
        "http": (httpclient, httpclient.InferenceServerClient(urls["http"], network_timeout=600)),
        "grpc": (grpcclient, grpcclient.InferenceServerClient(urls["grpc"])),
    }


def _plain(module: Any, client: Any, data: np.ndarray) -> Callable[[], np.ndarray]:
    """One request carrying ``data`` itself; returns the echo."""
    binary = {"binary_data": True} if module.__name__.endswith("http") else {}
    output = module.InferRequestedOutput("OUT_FP32", **binary)

    def send() -> np.ndarray:
        tensor = module.InferInput("IN_FP32", [1, ELEMENTS], "FP32")
        tensor.set_data_from_numpy(data, **binary)
        result = client.infer(MODEL, [tensor], outputs=[output])
        echo: np.ndarray = result.as_numpy("OUT_FP32")
        return echo

    return send


def _in_regions(
    module: Any, client: Any, data: np.ndarray, tag: str
) -> tuple[Callable[[], np.ndarray], list[Any]]:
    """One request with its input and output in system shared-memory regions, and the
    regions' handles (to destroy once done)."""
    keys = {name: f"/wb_bench_{os.getpid()}_{tag}_{name}" for name in ("in", "out")}
    handles = {name: shm.create_shared_memory_region(name, k, BYTES) for name, k in keys.items()}
    client.unregister_system_shared_memory()
    for name, key in keys.items():
        client.register_system_shared_memory(name, key, BYTES)
    tensor = module.InferInput("IN_FP32", [1, ELEMENTS], "FP32")
    tensor.set_shared_memory("in", BYTES)
    output = module.InferRequestedOutput("OUT_FP32")
    output.set_shared_memory("out", BYTES)

    def send() -> np.ndarray:
        shm.set_shared_memory_region(handles["in"], [data])
        client.infer(MODEL, [tensor], outputs=[output])
        echo: np.ndarray = shm.get_contents_as_numpy(handles["out"], np.float32, [1, ELEMENTS])
        return echo

    return send, list(handles.values())


def _timed(send: Callable[[], np.ndarray], data: np.ndarray, warmup: int, count: int) -> float:
    """Seconds for ``count`` requests after ``warmup``; the first and last echo are checked."""
    for _ in range(warmup):
        np.testing.assert_array_equal(send(), data)
    started = time.perf_counter()
    for _ in range(count - 1):
        send()
    echo = send()
    seconds = time.perf_counter() - started
    np.testing.assert_array_equal(echo, data)
    return seconds


def run(server: str, urls: dict[str, str], warmup: int, count: int) -> dict[str, float]:
    """MB/s of each path against one server."""
    data = np.random.default_rng(0).random((1, ELEMENTS), dtype=np.float32)
    clients = _clients(urls)
    rates = {}
    for path in PATHS:
        module, client = clients[path.split()[-1]]
        handles: list[Any] = []
        if path.startswith("shm"):
            send, handles = _in_regions(module, client, data, path.replace(" ", "_"))
        else:
            send = _plain(module, client, data)
        seconds = _timed(send, data, warmup, count)
        rates[path] = 2 * BYTES * count / seconds / 1e6
        if handles:
            client.unregister_system_shared_memory()
        for handle in handles:
            shm.destroy_shared_memory_region(handle)
        print(f"{server:12} {path:9} {rates[path]:8.1f} MB/s ({count} in {seconds:.2f} s)")
    return rates


def report(results: dict[str, dict[str, float]], warmup: int, count: int) -> str:
    theirs, ours = results[TRITON], results[WORKBENCH]
    rows = [
        [path, f"{theirs[path]:,.0f}", f"{ours[path]:,.0f}", ratio(ours[path], theirs[path])]
        for path in PATHS
    ]
    table = markdown_table(["path", "Triton MB/s", "workbench MB/s", "workbench / Triton"], rows)
    speedups = [
        [path, ratio(theirs[path], theirs["http"]), ratio(ours[path], ours["http"])]
        for path in ("shm http", "shm grpc", "grpc")
    ]
    versus = markdown_table(["path / HTTP binary", "Triton", "workbench"], speedups)
    return (
        f"`{MODEL}` (Python backend) echoing FP32[1, {ELEMENTS}] (16 MiB) at concurrency 1 with "
        f"tritonclient: {warmup} warm-up then {count} timed requests per path, one run. MB/s "
        "counts input and output (32 MiB per request, 1 MB = 10^6 bytes). `shm`: input written "
        "into its region before each request, output read in its region.\n\n"
        f"{table}\n\nEach path against HTTP binary on the same server:\n\n{versus}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    info = machine_info()  # the load before anything starts
    peers = prepare()
    work = Path(tempfile.mkdtemp(prefix="shared-memory-"))
    source = REPO_ROOT / "tests" / "assets" / "conformance_repo"
    results = {}
    repo = copy_repository(source, work / "triton_repo")
    with TritonServerProcess(peers, repo, log_path=work / "triton.log", load_models=[MODEL]) as t:
        urls = {"http": t.http_url, "grpc": t.grpc_url}
        results[TRITON] = run(TRITON, urls, args.warmup, args.requests)
    repo = copy_repository(source, work / "workbench_repo")
    with workbench_server(repo, work / "workbench.log", [MODEL]) as ours:
        urls = {"http": ours.http_url, "grpc": ours.grpc_url}
        results[WORKBENCH] = run(WORKBENCH, urls, args.warmup, args.requests)
    body = report(results, args.warmup, args.requests)
    print(body)
    write_report(results_path("shared_memory"), "Shared memory", body, info, "")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
