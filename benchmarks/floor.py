"""The speed floor for Python models: the leanest server design that still uses a child process.

Not the workbench: a reference for issue #3 (Python models at >= 1.5x Triton at concurrency 1).
It serves only what perf_analyzer needs for ``add_one`` (server metadata, model metadata,
config, ``infer`` with binary tensors) from a raw ``asyncio.Protocol`` on uvloop with httptools,
sends each request's tensor bytes to a forked child over a socketpair, adds one there with
numpy, and writes the reply by hand. Whatever the workbench's hot path costs beyond this is
overhead of our own design, not of Python or of the stub process. Usage::

    python benchmarks/floor.py --concurrency 1 8      # real Triton, then the floor, one run

Measured on the 2-core machine (2026-11-22): 4,180-4,720 infer/s at c=1 against real Triton's
1,317-1,715 in the same run (the workbench: ~1,000-1,150).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._harness import (  # noqa: E402
    REPO_ROOT,
    TRITON,
    PerfSettings,
    Series,
    measure_series,
    stop_session,
)
from benchmarks.http_throughput import format_table  # noqa: E402
from tests.integration.peers import (  # noqa: E402
    TritonServerProcess,
    copy_repository,
    free_port,
    prepare,
    wait_ready,
)

MODEL = "add_one"
FLOOR = "floor (raw httptools + child process)"
_LENGTH = struct.Struct("<I")
_TENSOR = {"datatype": "FP32", "shape": [-1, 16]}
_CONFIG = {
    "name": MODEL,
    "backend": "python",
    "max_batch_size": 8,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    "dynamic_batching": {},
    "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
}
_METADATA = {
    "name": MODEL,
    "versions": ["1"],
    "platform": "python",
    "inputs": [{"name": "INPUT0", **_TENSOR}],
    "outputs": [{"name": "OUTPUT0", **_TENSOR}],
}
_SERVER = {"name": "floor", "version": "0", "extensions": ["binary_tensor_data"]}


def _child(sock: socket.socket) -> None:
    """The "stub": length-prefixed FP32 bytes in, the same plus one out."""
    import numpy as np

    buffer = b""
    while True:
        while (
            len(buffer) < _LENGTH.size
            or len(buffer) < _LENGTH.size + _LENGTH.unpack_from(buffer)[0]
        ):
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            buffer += chunk
        (size,) = _LENGTH.unpack_from(buffer)
        data, buffer = buffer[_LENGTH.size : _LENGTH.size + size], buffer[_LENGTH.size + size :]
        out = (np.frombuffer(data, np.float32) + 1).tobytes()
        sock.sendall(_LENGTH.pack(len(out)) + out)


class _Stub:
    """The server's end of the socketpair: one future per call, answered in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.loop, self.sock = loop, sock
        self.buffer = bytearray()
        self.waiting: list[asyncio.Future[bytes]] = []
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._readable)

    def call(self, data: bytes) -> asyncio.Future[bytes]:
        future = self.loop.create_future()
        self.waiting.append(future)
        self.sock.send(_LENGTH.pack(len(data)) + data)
        return future

    def _readable(self) -> None:
        self.buffer += self.sock.recv(1 << 16)
        while len(self.buffer) >= _LENGTH.size:
            (size,) = _LENGTH.unpack_from(self.buffer)
            if len(self.buffer) < _LENGTH.size + size:
                return
            out = bytes(self.buffer[_LENGTH.size : _LENGTH.size + size])
            del self.buffer[: _LENGTH.size + size]
            self.waiting.pop(0).set_result(out)


class _Protocol(asyncio.Protocol):
    """One HTTP/1.1 keep-alive connection, parsed by httptools."""

    def __init__(self, stub: _Stub) -> None:
        import httptools

        self.stub = stub
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url, self.body, self.header_length = b"", [], 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.url, self.body, self.header_length = b"", [], 0

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"inference-header-content-length":
            self.header_length = int(value)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        if self.url.endswith(b"/infer"):
            asyncio.ensure_future(self._infer(body, self.header_length))
            return
        if self.url.endswith(b"/config"):
            answer = _CONFIG
        else:
            answer = _METADATA if self.url.startswith(b"/v2/models/") else _SERVER
        self._reply(json.dumps(answer).encode(), b"")

    async def _infer(self, body: bytes, header_length: int) -> None:
        header = json.loads(body[:header_length])
        out = await self.stub.call(body[header_length:])
        output = {
            "name": "OUTPUT0",
            "datatype": "FP32",
            "shape": header["inputs"][0]["shape"],
            "parameters": {"binary_data_size": len(out)},
        }
        reply = json.dumps({"model_name": MODEL, "model_version": "1", "outputs": [output]})
        head = reply.encode()
        self._reply(head + out, b"Inference-Header-Content-Length: %d\r\n" % len(head))

    def _reply(self, payload: bytes, extra: bytes) -> None:
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + extra
            + b"Content-Length: %d\r\n\r\n" % len(payload)
            + payload
        )


def serve(port: int) -> None:
    """Serve on 127.0.0.1:``port`` until killed (the forked child ends with the socket)."""
    import uvloop

    server_end, child_end = socket.socketpair()
    if os.fork() == 0:
        server_end.close()
        _child(child_end)
        os._exit(0)
    child_end.close()
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    stub = _Stub(loop, server_end)
    loop.run_until_complete(loop.create_server(lambda: _Protocol(stub), "127.0.0.1", port))
    loop.run_forever()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve)
        return 0
    peers, settings = prepare(), PerfSettings(measurement_ms=args.measurement_ms)
    workdir = Path(tempfile.mkdtemp(prefix="floor-"))
    source = REPO_ROOT / "tests" / "assets" / "conformance_repo"
    triton = Series(TRITON, MODEL)
    repository = copy_repository(source, workdir / "repo")
    log = workdir / "tritonserver.log"
    with TritonServerProcess(peers, repository, log_path=log, load_models=(MODEL,)) as server:
        measure_series(peers, triton, server.http_url, args.concurrency, settings)
    floor = Series(FLOOR, MODEL)
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)]
    process = subprocess.Popen(command, start_new_session=True)
    try:
        failure = wait_ready(process, f"127.0.0.1:{port}", 30)
        if failure is not None:
            raise RuntimeError(f"the floor server {failure}")
        measure_series(peers, floor, f"127.0.0.1:{port}", args.concurrency, settings)
    finally:
        stop_session(process, 5)
    print("\n" + format_table([triton, floor], args.concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
