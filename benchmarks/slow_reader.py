"""A client that pipelines large requests and reads none of the replies: what does the server
hold meanwhile? Real Triton 2.51 vs workbench, over HTTP with the binary tensor extension and
over a gRPC stream (``ModelStreamInfer``).

``--requests`` requests to ``identity_all`` (``tests/assets/conformance_repo``: the stub echoes
a ``UINT8`` tensor of ``--size-mib``) go out back to back, on one raw HTTP connection with a
small receive buffer (as a slow client has) or on one gRPC stream, and nothing is read for
``--hold-s`` seconds. Meanwhile the server's process tree (server and stubs) is sampled for its
resident memory, and its own statistics say how many of the requests it has executed. Then the
client reads every reply and checks each one's length. A server with flow control on its writes
stops serving a client that does not read once its send buffers are full (workbench over HTTP:
``HttpConnection.pause_writing``); one without serves every request and holds every reply.

    python benchmarks/slow_reader.py                       # 32 requests of 4 MiB, ~2 minutes
    python benchmarks/slow_reader.py --protocols http      # HTTP only
    python benchmarks/slow_reader.py --engines workbench   # no real Triton needed

Not a test: the Triton arm needs the real peers (``python -m tests.integration.peers prepare``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._harness import (  # noqa: E402
    REPO_ROOT,
    TRITON,
    WORKBENCH,
    machine_info,
    markdown_table,
    results_path,
    workbench_server,
    write_report,
)
from benchmarks.large_message_memory import peak_sampler, tree_rss  # noqa: E402
from tests.integration.peers import (  # noqa: E402
    TritonServerProcess,
    copy_repository,
    prepare,
)

MIB = 1 << 20
MODEL = "identity_all"
#: the client's receive buffer (the kernel doubles it): a client slower than the server
CLIENT_RCVBUF = 64 * 1024
PROTOCOLS = ("http", "grpc-stream")


@dataclass
class Held:
    server: str
    protocol: str
    requests: int
    size_mib: int
    #: requests the server executed while the client read nothing
    executed_unread: int
    #: the highest resident memory of the server's process tree above its baseline
    peak_mib: float
    replies_ok: int


def request(size: int) -> bytes:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "IN_UINT8",
                    "datatype": "UINT8",
                    "shape": [1, size],
                    "parameters": {"binary_data_size": size},
                }
            ],
            "outputs": [{"name": "OUT_UINT8", "parameters": {"binary_data": True}}],
        }
    ).encode()
    head = (
        f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\n"
        f"Content-Length: {len(header) + size}\r\n\r\n"
    ).encode()
    return head + header + bytes(size)


def executed(url: str) -> int:
    with urllib.request.urlopen(f"http://{url}/v2/models/{MODEL}/stats", timeout=10) as answer:
        stats = json.loads(answer.read())["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def read_replies(sock: socket.socket, count: int, size: int) -> int:
    """Reads ``count`` replies off ``sock``; how many were a 200 carrying ``size`` bytes."""
    buffer, good = b"", 0
    for _ in range(count):
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return good
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:])
        length = int(headers[b"content-length"])
        parts, have = [buffer], len(buffer)
        while have < length:
            chunk = sock.recv(1 << 20)
            if not chunk:
                return good
            parts.append(chunk)
            have += len(chunk)
        body = b"".join(parts)
        buffer = body[length:]
        good += lines[0].split()[1] == b"200" and length >= size
    return good


class _HttpClient:
    """The requests pipelined on one raw connection, sent from a thread (it blocks once the
    server stops reading)."""

    def __init__(self, url: str, size: int, count: int) -> None:
        self.size, self.count = size, count
        host, port = url.split(":")
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF)
        self.sock.settimeout(120)
        self.sock.connect((host, int(port)))
        payload = request(size)
        self.sender = threading.Thread(
            target=lambda: [self.sock.sendall(payload) for _ in range(count)], daemon=True
        )

    def start(self) -> None:
        self.sender.start()

    def read_back(self) -> int:
        return read_replies(self.sock, self.count, self.size)

    def close(self) -> None:
        self.sender.join(timeout=60)
        self.sock.close()


class _StreamClient:
    """The requests on one gRPC ``ModelStreamInfer`` stream; its responses read only when
    asked."""

    def __init__(self, url: str, size: int, count: int) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.size, self.count = size, count
        unlimited = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        self.channel = grpc.insecure_channel(url, options=unlimited)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        message = service_pb2.ModelInferRequest(model_name=MODEL)
        message.inputs.add(name="IN_UINT8", datatype="UINT8", shape=[1, size])
        message.raw_input_contents.append(bytes(size))
        self.message = message
        self.responses: Any = None

    def start(self) -> None:
        self.responses = self.stub.ModelStreamInfer(iter([self.message] * self.count))

    def read_back(self) -> int:
        good = 0
        for response in itertools.islice(self.responses, self.count):
            contents = response.infer_response.raw_output_contents
            good += not response.error_message and len(contents[0]) >= self.size
        return good

    def close(self) -> None:
        self.responses.cancel()
        self.channel.close()


def hold(
    server: str,
    pid: int,
    urls: dict[str, str],
    protocol: str,
    count: int,
    size_mib: int,
    hold_s: float,
) -> Held:
    size = size_mib * MIB
    before = executed(urls["http"])
    time.sleep(1.0)
    client: _HttpClient | _StreamClient
    if protocol == "http":
        client = _HttpClient(urls["http"], size, count)
    else:
        client = _StreamClient(urls["grpc"], size, count)
    with peak_sampler(pid, tree_rss) as peak:
        baseline = peak()[0]
        client.start()
        time.sleep(hold_s)
        unread = executed(urls["http"]) - before
        highest = peak()[0]
        good = client.read_back()
    client.close()
    return Held(server, protocol, count, size_mib, unread, (highest - baseline) / MIB, good)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--size-mib", type=int, default=4)
    parser.add_argument("--hold-s", type=float, default=10.0)
    parser.add_argument("--engines", nargs="+", default=[TRITON, WORKBENCH])
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="slow-reader-"))
    source = REPO_ROOT / "tests" / "assets" / "conformance_repo"
    rows: list[Held] = []
    measure = (args.requests, args.size_mib, args.hold_s)

    def each_protocol(server: str, pid: int, urls: dict[str, str]) -> None:
        for protocol in args.protocols:
            rows.append(hold(server, pid, urls, protocol, *measure))
            print(rows[-1], flush=True)

    if TRITON in args.engines or "triton" in args.engines:
        repo = copy_repository(source, work / "triton_repo")
        with TritonServerProcess(
            prepare(), repo, log_path=work / "triton.log", load_models=[MODEL]
        ) as triton:
            assert triton.pid is not None
            each_protocol(TRITON, triton.pid, {"http": triton.http_url, "grpc": triton.grpc_url})
    if WORKBENCH in args.engines:
        repo = copy_repository(source, work / "workbench_repo")
        with workbench_server(repo, work / "workbench.log", [MODEL]) as ours:
            assert ours.process is not None
            urls = {"http": ours.http_url, "grpc": ours.grpc_url}
            each_protocol(WORKBENCH, ours.process.pid, urls)
    shutil.rmtree(work, ignore_errors=True)
    header = [
        "server",
        "protocol",
        "requests × MiB",
        "executed while unread",
        "peak RSS above baseline (MiB)",
    ]
    table = markdown_table(
        [*header, "replies read back whole"],
        [
            [
                r.server,
                r.protocol,
                f"{r.requests} × {r.size_mib}",
                str(r.executed_unread),
                f"{r.peak_mib:,.0f}",
                f"{r.replies_ok}/{r.requests}",
            ]
            for r in rows
        ],
    )
    print(table)
    body = (
        f"`python benchmarks/slow_reader.py --requests {args.requests} --size-mib "
        f"{args.size_mib} --hold-s {args.hold_s} --protocols {' '.join(args.protocols)}`: one "
        "HTTP connection pipelines the requests (its receive buffer "
        f"{CLIENT_RCVBUF // 1024} KiB), or one gRPC stream sends them, and reads nothing for "
        f"{args.hold_s:g} s, then reads every reply.\n\n" + table + "\n"
    )
    write_report(
        results_path("slow_reader"), "A client that does not read", body, machine_info(), ""
    )


if __name__ == "__main__":
    main()
