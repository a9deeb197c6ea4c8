"""Server CPU per request over HTTP and gRPC, and what a bare grpc.aio server costs (issue #17).

CPU time (from ``/proc``) rather than throughput: it says where a request's cost lies and moves
far less than req/s on a shared 2-core machine. Three servers, one run:

- ``workbench serve`` on a copy of the conformance repository's ``add_one`` (FP32[16] + 1,
  python backend, dynamic batching), driven by tritonclient at concurrency 1 over HTTP and
  over gRPC, the latter once with each ``--grpc-implementation`` (native: gRPC's C++ server;
  grpcio: grpc.aio); the server's own CPU and that of its stub processes are reported apart;
- a bare ``grpc.aio`` echo server (a generic handler on raw bytes, uvloop, no protobuf, no
  model): the floor any servicer on grpc.aio pays per unary call here.

Usage::

    python benchmarks/grpc_cpu.py --requests 2000
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._harness import child_pids  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ECHO_SERVER = """
import asyncio, sys, grpc, uvloop
async def echo(request, context):
    return request
async def main():
    server = grpc.aio.server()
    same = lambda data: data
    handler = grpc.unary_unary_rpc_method_handler(echo, same, same)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("x.S", {"M": handler}),))
    server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
    await server.start()
    await server.wait_for_termination()
uvloop.run(main())
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(pid: int, send: Callable[[], object], requests: int) -> tuple[float, float, float]:
    """(server µs/request, its children's µs/request, requests/s) over ``requests`` calls."""
    for _ in range(200):  # warm up
        send()
    children = child_pids(pid)
    server, stubs, started = _cpu_s(pid), sum(map(_cpu_s, children)), time.perf_counter()
    for _ in range(requests):
        send()
    elapsed = time.perf_counter() - started
    server_us = 1e6 * (_cpu_s(pid) - server) / requests
    stubs_us = 1e6 * (sum(map(_cpu_s, children)) - stubs) / requests
    return server_us, stubs_us, requests / elapsed


def _wait_ready(check: Callable[[], bool]) -> None:
    for _ in range(300):
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready")


def workbench_rows(requests: int, implementation: str) -> list[tuple[str, float, float, float]]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    repository = Path(tempfile.mkdtemp(prefix="grpc-cpu-"))
    shutil.copytree(ROOT / "tests/assets/conformance_repo/add_one", repository / "add_one")
    http_port, grpc_port = _free_port(), _free_port()
    command = [sys.executable, "-m", "workbench", "serve", "--model-repository", str(repository)]
    command += ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    command += ["--metrics-port", str(_free_port()), "--grpc-implementation", implementation]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        _wait_ready(http.is_server_ready)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        data = np.ones((1, 16), np.float32)
        protocols = [("gRPC", grpc, grpcclient)]
        if implementation == "native":  # HTTP once
            protocols.insert(0, ("HTTP", http, httpclient))
        for label, client, module in protocols:
            label = f"gRPC ({implementation})" if client is grpc else label
            tensor = module.InferInput("INPUT0", [1, 16], "FP32")
            tensor.set_data_from_numpy(data)

            def send(client: object = client, tensor: object = tensor) -> object:
                return client.infer("add_one", [tensor])  # type: ignore[attr-defined]

            rows.append((f"workbench, {label}", *_measure(server.pid, send, requests)))
    finally:
        server.terminate()
        server.wait(60)
        shutil.rmtree(repository, ignore_errors=True)
    return rows


def echo_row(requests: int) -> tuple[str, float, float, float]:
    import grpc

    port = _free_port()
    server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port)])
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        call = channel.unary_unary("/x.S/M")
        payload = b"x" * 200
        _wait_ready(lambda: call(payload) == payload)
        return ("bare grpc.aio echo", *_measure(server.pid, lambda: call(payload), requests))
    finally:
        server.terminate()
        server.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    rows = [
        *workbench_rows(args.requests, "native"),
        *workbench_rows(args.requests, "grpcio"),
        echo_row(args.requests),
    ]
    print("| server, protocol | server CPU µs/request | stubs' CPU µs/request | requests/s (c=1) |")
    print("| --- | --- | --- | --- |")
    for label, server_us, stubs_us, rate in rows:
        print(f"| {label} | {server_us:.0f} | {stubs_us:.0f} | {rate:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
