"""Memory of one large request: peak and settled RSS, real Triton 2.51 vs workbench.

Each server (one at a time, each in its own process) serves two Python-backend models (the
tensor crosses to the stub process): ``identity_all`` from ``tests/assets/conformance_repo``
echoes it, ``checksum_py`` from ``tests/assets/large_tensor_repo`` answers with the sum of its
bytes (a large input, a small output: the request's own copy is all a server must hold). For
every model, size and protocol, one request carries a ``UINT8`` tensor of that size (HTTP with
the binary tensor extension, gRPC with raw contents) and its answer is checked. The server's
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
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import psutil

from benchmarks._harness import (  # noqa: E402
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
from tests.integration.peers import (  # noqa: E402
    TritonServerProcess,
    copy_repository,
    prepare,
)

MIB = 1 << 20
SAMPLE_S = 0.02
SETTLE_S = 2.0
ECHO = "identity_all"
CHECKSUM = "checksum_py"
MODELS = (ECHO, CHECKSUM)


@dataclass
class Point:
    server: str
    model: str
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


def tree_rss(pid: int) -> tuple[int, int]:
    """Resident bytes of ``pid`` and its descendants, twice (no PSS): read from ``statm``,
    which costs the server nothing. ``tree_memory``'s PSS walks every mapping's pages under
    the process's memory lock, which stalls a server that maps a memfd per large request
    (2026-11-26, two runs, not repeated: workbench's 1 MiB HTTP echo at c=4 did 986 MB/s
    unsampled and 613 with PSS sampled every 20 ms)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    rss = 0
    for process in processes:
        try:
            rss += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return rss, rss


@contextmanager
def peak_sampler(
    pid: int, read: Callable[[int], tuple[int, int]] = tree_memory
) -> Iterator[Callable[[], tuple[int, int]]]:
    """Samples ``read(pid)`` (``tree_memory``: RSS and PSS) on a thread; yields a function
    returning the peaks so far."""
    peak = list(read(pid))
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_S):
            rss, pss = read(pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: (peak[0], peak[1])
    finally:
        done.set()
        thread.join()


def send(model: str, protocol: str, url: str, array: np.ndarray) -> None:
    """One request carrying ``array``; checks the echo's size or the checksum."""
    names = ("IN_UINT8", "OUT_UINT8") if model == ECHO else ("INPUT0", "OUTPUT0")
    if protocol == "http":
        import tritonclient.http as client_module

        client = client_module.InferenceServerClient(url, network_timeout=600)
        tensor = client_module.InferInput(names[0], list(array.shape), "UINT8")
        tensor.set_data_from_numpy(array, binary_data=True)
        wanted = [client_module.InferRequestedOutput(names[1], binary_data=True)]
        result = client.infer(model, [tensor], outputs=wanted)
    else:
        import tritonclient.grpc as client_module  # type: ignore[no-redef]

        limit = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        client = client_module.InferenceServerClient(url, channel_args=limit)
        tensor = client_module.InferInput(names[0], list(array.shape), "UINT8")
        tensor.set_data_from_numpy(array)
        result = client.infer(model, [tensor], client_timeout=600)
    answer = result.as_numpy(names[1])
    if model == ECHO:
        assert answer is not None and answer.nbytes == array.nbytes, "the echo lost bytes"
    else:
        assert answer is not None and int(answer[0]) == array.size, "wrong checksum"
    client.close()


def measure(server: str, pid: int, url: str, model: str, protocol: str, size_mib: int) -> Point:
    shape = (1, size_mib * MIB) if model == ECHO else (size_mib * MIB,)
    array = np.ones(shape, dtype=np.uint8)
    time.sleep(SETTLE_S)
    baseline, baseline_pss = tree_memory(pid)
    started = time.monotonic()
    with peak_sampler(pid) as peak:
        send(model, protocol, url, array)
        seconds = time.monotonic() - started
        time.sleep(SETTLE_S)
        settled = tree_memory(pid)[0]
        highest, highest_pss = peak()
    del array
    return Point(
        server,
        model,
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
    for model in MODELS:
        for protocol in ("http", "grpc"):
            for size in sizes:
                point = measure(server, pid, urls[protocol], model, protocol, size)
                print(f"{server:12} {model:12} {protocol:4} {size:5} MiB: {point}", flush=True)
                points.append(point)
    return points


def repository(work: Path, name: str) -> Path:
    """The conformance repository with ``checksum_py`` added."""
    repo = copy_repository(REPO_ROOT / "tests" / "assets" / "conformance_repo", work / name)
    shutil.copytree(
        REPO_ROOT / "tests" / "assets" / "large_tensor_repo" / CHECKSUM, repo / CHECKSUM
    )
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    peers = prepare()
    work = Path(tempfile.mkdtemp(prefix="large-message-"))
    points: list[Point] = []
    repo = repository(work, "triton_repo")
    with TritonServerProcess(
        peers, repo, log_path=work / "triton.log", load_models=list(MODELS)
    ) as triton:
        assert triton.pid is not None
        urls = {"http": triton.http_url, "grpc": triton.grpc_url}
        points += run(TRITON, triton.pid, urls, args.sizes_mib)
    repo = repository(work, "workbench_repo")
    # Triton 2.51 has no HTTP body limit; ours (Triton 2.52's flag) defaults to 64 MiB
    body_limit = [f"--http-max-input-size={2 * max(args.sizes_mib) * MIB}"]
    with workbench_server(repo, work / "workbench.log", list(MODELS), body_limit) as ours:
        assert ours.process is not None
        urls = {"http": ours.http_url, "grpc": ours.grpc_url}
        points += run(WORKBENCH, ours.process.pid, urls, args.sizes_mib)
    report(points, args.sizes_mib)
    if args.json:
        args.json.write_text(json.dumps([asdict(p) for p in points], indent=1))
    shutil.rmtree(work, ignore_errors=True)


def report(points: list[Point], sizes: list[int]) -> None:
    by_key = {(p.server, p.model, p.protocol, p.size_mib): p for p in points}
    rows = []
    for model in MODELS:
        for protocol in ("http", "grpc"):
            for size in sizes:
                theirs = by_key[(TRITON, model, protocol, size)]
                ours = by_key[(WORKBENCH, model, protocol, size)]
                rows.append(
                    [
                        model,
                        protocol,
                        f"{size}",
                        f"{theirs.peak_mib:.0f}",
                        f"{ours.peak_mib:.0f}",
                        ratio(ours.peak_mib, theirs.peak_mib),
                        f"{theirs.peak_pss_mib:.0f} ({theirs.peak_pss_mib / size:.1f})",
                        f"{ours.peak_pss_mib:.0f} ({ours.peak_pss_mib / size:.1f})",
                        ratio(ours.peak_pss_mib, theirs.peak_pss_mib),
                        f"{theirs.settled_mib:.0f}",
                        f"{ours.settled_mib:.0f}",
                    ]
                )
    header = [
        "model",
        "protocol",
        "request MiB",
        "Triton RSS peak",
        "workbench RSS peak",
        "RSS ratio",
        "Triton PSS peak (copies)",
        "workbench PSS peak (copies)",
        "PSS ratio",
        "Triton settled",
        "workbench settled",
    ]
    table = markdown_table(header, rows)
    print(table)
    body = (
        "MiB above each server's memory before the request, summed over its process tree (the "
        "server and its Python stubs). RSS counts a page shared by the server and a stub in "
        "each; PSS counts it once, so a PSS peak divided by the request's size is the number "
        "of copies held.\n\n" + table
    )
    write_report(
        results_path("large_message_memory"), "Large message memory", body, machine_info(), ""
    )


if __name__ == "__main__":
    main()
