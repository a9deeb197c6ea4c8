"""Memory of one large request: peak and settled RSS, real Triton 2.51 vs workbench.

Each server (one at a time, each in its own process) serves ``identity_all`` from
``tests/assets/conformance_repo`` (Python backend: the tensor crosses to the stub process and
back). For every size and protocol, one request carries a ``UINT8[1, size]`` tensor (HTTP with
the binary tensor extension, gRPC with raw contents) and its echo comes back. The server's
resident memory is summed over its process tree (the server and its stubs), sampled every
20 ms while the request runs (peak) and 2 s after the reply (settled), each against the
baseline before the request. Numbers are MiB above that baseline; ratios are workbench/Triton
(below 1.00x: we hold less). RSS counts a shared-memory page once in each process that maps it
(the server and its stub both do); the proportional set size (PSS) counts it once in all, so
the workbench's PSS peak divided by the request's size is the number of copies it held.

    python benchmarks/large_message_memory.py --sizes-mib 256 1024 --json out.json

Not a test: it needs the real peers (``python -m tests.integration.peers prepare``) and
about 4x the largest size free in RAM (client and server copies).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psutil
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

MIB = 1 << 20
SAMPLE_S = 0.02
SETTLE_S = 2.0
MODEL = "identity_all"


@dataclass
class Point:
    server: str
    protocol: str
    size_mib: int
    baseline_mib: float
    peak_mib: float
    #: the peak of the proportional set size (a page shared by server and stub counted once)
    peak_pss_mib: float
    settled_mib: float
    seconds: float


def tree_memory(pid: int) -> tuple[int, int]:
    """Resident and proportional bytes of ``pid`` and all its descendants (stubs included)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    rss = pss = 0
    for process in processes:
        try:
            memory = process.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        rss, pss = rss + memory.rss, pss + memory.pss
    return rss, pss


@contextmanager
def peak_sampler(pid: int) -> Iterator[Callable[[], tuple[int, int]]]:
    """Samples ``tree_memory(pid)`` on a thread; yields a function returning the peaks so far
    (RSS, PSS)."""
    peak = list(tree_memory(pid))
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            rss, pss = tree_memory(pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: (peak[0], peak[1])
    finally:
        done.set()
        thread.join()


def send(protocol: str, url: str, array: np.ndarray) -> None:
    """One identity request carrying ``array``; checks the echo's size."""
    if protocol == "http":
        import tritonclient.http as client_module

        client = client_module.InferenceServerClient(url, network_timeout=600)
        tensor = client_module.InferInput("IN_UINT8", list(array.shape), "UINT8")
        tensor.set_data_from_numpy(array, binary_data=True)
        wanted = [client_module.InferRequestedOutput("OUT_UINT8", binary_data=True)]
        result = client.infer(MODEL, [tensor], outputs=wanted)
    else:
        import tritonclient.grpc as client_module  # type: ignore[no-redef]

        limit = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        client = client_module.InferenceServerClient(url, channel_args=limit)
        tensor = client_module.InferInput("IN_UINT8", list(array.shape), "UINT8")
        tensor.set_data_from_numpy(array)
        result = client.infer(MODEL, [tensor], client_timeout=600)
    echo = result.as_numpy("OUT_UINT8")
    assert echo is not None and echo.nbytes == array.nbytes, "the echo lost bytes"
    client.close()


def measure(server: str, pid: int, url: str, protocol: str, size_mib: int) -> Point:
    array = np.ones((1, size_mib * MIB), dtype=np.uint8)
    time.sleep(SETTLE_S)
    baseline, baseline_pss = tree_memory(pid)
    started = time.monotonic()
    with peak_sampler(pid) as peak:
        send(protocol, url, array)
        seconds = time.monotonic() - started
        time.sleep(SETTLE_S)
        settled = tree_memory(pid)[0]
        highest, highest_pss = peak()
    del array
    return Point(
        server,
        protocol,
        size_mib,
        baseline / MIB,
        (highest - baseline) / MIB,
        (highest_pss - baseline_pss) / MIB,
        (settled - baseline) / MIB,
        seconds,
    )


def run(server: str, pid: int, urls: dict[str, str], sizes: list[int]) -> list[Point]:
    points = []
    for protocol in ("http", "grpc"):
        for size in sizes:
            point = measure(server, pid, urls[protocol], protocol, size)
            print(f"{server:12} {protocol:4} {size:5} MiB: {point}", flush=True)
            points.append(point)
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    peers = prepare()
    work = Path(tempfile.mkdtemp(prefix="large-message-"))
    source = REPO_ROOT / "tests" / "assets" / "conformance_repo"
    points: list[Point] = []
    repo = copy_repository(source, work / "triton_repo")
    with TritonServerProcess(
        peers, repo, log_path=work / "triton.log", load_models=[MODEL]
    ) as triton:
        assert triton.pid is not None
        urls = {"http": triton.http_url, "grpc": triton.grpc_url}
        points += run(TRITON, triton.pid, urls, args.sizes_mib)
    repo = copy_repository(source, work / "workbench_repo")
    # Triton 2.51 has no HTTP body limit; ours (Triton 2.52's flag) defaults to 64 MiB
    body_limit = [f"--http-max-input-size={2 * max(args.sizes_mib) * MIB}"]
    with workbench_server(repo, work / "workbench.log", [MODEL], body_limit) as ours:
        assert ours.process is not None
        urls = {"http": ours.http_url, "grpc": ours.grpc_url}
        points += run(WORKBENCH, ours.process.pid, urls, args.sizes_mib)
    report(points, args.sizes_mib)
    if args.json:
        args.json.write_text(json.dumps([asdict(p) for p in points], indent=1))
    shutil.rmtree(work, ignore_errors=True)


def report(points: list[Point], sizes: list[int]) -> None:
    by_key = {(p.server, p.protocol, p.size_mib): p for p in points}
    rows = []
    for protocol in ("http", "grpc"):
        for size in sizes:
            theirs, ours = by_key[(TRITON, protocol, size)], by_key[(WORKBENCH, protocol, size)]
            rows.append(
                [
                    protocol,
                    f"{size}",
                    f"{theirs.peak_mib:.0f}",
                    f"{ours.peak_mib:.0f}",
                    ratio(ours.peak_mib, theirs.peak_mib),
                    f"{ours.peak_pss_mib:.0f} ({ours.peak_pss_mib / size:.1f})",
                    f"{theirs.settled_mib:.0f}",
                    f"{ours.settled_mib:.0f}",
                ]
            )
    header = [
        "protocol",
        "request MiB",
        "Triton peak",
        "workbench peak",
        "peak ratio",
        "workbench PSS peak (copies)",
        "Triton settled",
        "workbench settled",
    ]
    table = markdown_table(header, rows)
    print(table)
    body = (
        "MiB above each server's resident memory before the request (RSS; PSS counts a page "
        "shared by the server and its stub once).\n\n" + table
    )
    write_report(
        results_path("large_message_memory"), "Large message memory", body, machine_info(), ""
    )


if __name__ == "__main__":
    main()
