"""Large tensors in and out: 1 MiB and 16 MiB FP32 echoes, real Triton 2.51 vs workbench.

Each server (one at a time, each in its own process) serves ``identity_py`` (Python backend,
one instance: the tensor crosses to the stub process and back); the workbench also serves
``identity_onnx`` (an ONNX ``Identity`` built at run time with ``onnx.helper``; the Triton in
the pytriton wheel has no onnxruntime backend, so that row is ours alone). For every model,
protocol (HTTP with the binary tensor extension in and out, gRPC raw contents), size and
concurrency, ``concurrency`` threads each with its own ``tritonclient`` client send
``INPUT0[n]`` and read ``OUTPUT0`` back in a closed loop for ``--seconds``, after warm-up.

Reported per cell: MB/s round trip (input plus output bytes per second, 1 MB = 10^6 bytes),
requests/s, p50 latency, and the peak resident memory of the server's process tree (server
plus stubs, sampled every 20 ms during the cell; a shared-memory page mapped by both counts
twice, as ``ps`` shows it); ratios are workbench / Triton.

    python benchmarks/large_tensors.py --seconds 3

Not a test: it needs the real peers (``python -m tests.integration.peers prepare``). Loopback
only.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
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
from large_message_memory import peak_sampler, tree_memory

from tests.integration.peers import TritonServerProcess, copy_repository, prepare

MIB = 1 << 20
PYTHON_MODEL = "identity_py"
ONNX_MODEL = "identity_onnx"
PROTOCOLS = ("http", "grpc")

#: the identity python model, shared with ``tests/server/test_large_tensor_copies.py``
IDENTITY_REPO = REPO_ROOT / "tests" / "assets" / "large_tensor_repo"
_PYTHON_CONFIG = (IDENTITY_REPO / PYTHON_MODEL / "config.pbtxt").read_text()
_ONNX_CONFIG = _PYTHON_CONFIG.replace("identity_py", ONNX_MODEL).replace(
    '"python"', '"onnxruntime"'
)


@dataclass
class Cell:
    server: str
    model: str
    protocol: str
    size_mib: int
    concurrency: int
    requests: int = 0
    seconds: float = 0.0
    p50_ms: float = 0.0
    peak_rss_mib: float = 0.0
    error: str | None = None

    @property
    def mb_per_s(self) -> float:
        """Input plus output bytes per second, in 10^6 bytes."""
        return 2 * self.size_mib * MIB * self.requests / self.seconds / 1e6 if self.seconds else 0

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


# --- repository ------------------------------------------------------------------------------


def onnx_identity() -> bytes | None:
    """An ONNX ``Identity`` FP32[n] -> FP32[n]; None (and a printed reason) without ``onnx``."""
    try:
        import onnx
        from onnx import TensorProto, helper
    except ImportError as exc:
        print(f"skipping {ONNX_MODEL}: onnx is not installed ({exc})")
        return None
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["n"])],
    )
    opsets = [helper.make_opsetid("", 17)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="workbench-benchmarks")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def write_repository(root: Path, onnx_model: bytes | None) -> Path:
    """``identity_py`` and, given its bytes, ``identity_onnx`` under ``root``."""
    copy_repository(IDENTITY_REPO, root)
    if onnx_model is not None:
        version = root / ONNX_MODEL / "1"
        version.mkdir(parents=True)
        (version / "model.onnx").write_bytes(onnx_model)
        (root / ONNX_MODEL / "config.pbtxt").write_text(_ONNX_CONFIG)
    return root


# --- load ------------------------------------------------------------------------------------


def sender(protocol: str, url: str, model: str, data: np.ndarray) -> Callable[[], None]:
    """One echo request on a client of its own; raises when the echo is not the input."""
    if protocol == "http":
        import tritonclient.http as module

        client: Any = module.InferenceServerClient(url, network_timeout=120)
        binary = {"binary_data": True}
    else:
        import tritonclient.grpc as module  # type: ignore[no-redef]

        limit = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        client = module.InferenceServerClient(url, channel_args=limit)
        binary = {}
    output = module.InferRequestedOutput("OUTPUT0", **binary)

    def send() -> None:
        tensor = module.InferInput("INPUT0", list(data.shape), "FP32")
        tensor.set_data_from_numpy(data, **binary)
        echo = client.infer(model, [tensor], outputs=[output]).as_numpy("OUTPUT0")
        if echo is None or echo.nbytes != data.nbytes or echo[-1] != data[-1]:
            raise RuntimeError("the echo is not the input")

    return send


def closed_loop(
    make_send: Callable[[], Callable[[], None]], threads: int, seconds: float, warmup: int
) -> tuple[int, float, list[float]]:
    """``threads`` threads, each making its own client (tritonclient's HTTP client belongs to
    the thread that made it) and sending back to back until ``seconds`` have passed after a
    common start: (requests, elapsed seconds, latencies in ms)."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    began, deadline = [0.0], [0.0]

    def go() -> None:  # run once every thread is at the barrier, before any goes on
        began[0] = time.perf_counter()
        deadline[0] = began[0] + seconds

    start = threading.Barrier(threads + 1, action=go)

    def run() -> None:
        mine = []
        try:
            send = make_send()
            for _ in range(warmup):
                send()
            start.wait()
            while time.perf_counter() < deadline[0]:
                began = time.perf_counter()
                send()
                mine.append((time.perf_counter() - began) * 1e3)
        except BaseException as exc:  # noqa: BLE001 - reported with the cell
            start.abort()
            errors.append(exc)
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        start.wait()  # every client made and warm
    except threading.BrokenBarrierError:
        pass
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - began[0]
    if errors:
        raise RuntimeError(f"{type(errors[0]).__name__}: {errors[0]}")
    return len(latencies), elapsed, latencies


def measure(cell: Cell, pid: int, url: str, seconds: float, warmup: int) -> Cell:
    data = np.random.default_rng(0).random(cell.size_mib * MIB // 4, dtype=np.float32)
    try:
        make_send = functools.partial(sender, cell.protocol, url, cell.model, data)
        with peak_sampler(pid) as peak:
            cell.requests, cell.seconds, latencies = closed_loop(
                make_send, cell.concurrency, seconds, warmup
            )
            cell.peak_rss_mib = peak()[0] / MIB
        cell.p50_ms = statistics.median(latencies) if latencies else 0.0
    except Exception as exc:  # noqa: BLE001 - a failed cell is reported, the run goes on
        cell.error = str(exc)
    print(f"  {describe(cell)}", flush=True)
    return cell


def describe(cell: Cell) -> str:
    where = f"{cell.server} {cell.model} {cell.protocol} {cell.size_mib} MiB c={cell.concurrency}"
    if cell.error:
        return f"{where}: FAILED {cell.error}"
    return (
        f"{where}: {cell.mb_per_s:,.0f} MB/s, {cell.per_s:,.1f} req/s, p50 {cell.p50_ms:.1f} ms, "
        f"peak RSS {cell.peak_rss_mib:,.0f} MiB"
    )


def run_server(
    server: str, models: list[str], pid: int, urls: dict[str, str], args: argparse.Namespace
) -> tuple[list[Cell], float]:
    """Every cell of ``models`` on one server, and its tree's idle RSS before them (MiB)."""
    time.sleep(1.0)
    idle = tree_memory(pid)[0] / MIB
    print(f"{server}: idle RSS {idle:,.0f} MiB", flush=True)
    cells = []
    for model in models:
        for protocol in PROTOCOLS:
            for size in args.sizes_mib:
                for concurrency in args.concurrency:
                    cell = Cell(server, model, protocol, size, concurrency)
                    cells.append(measure(cell, pid, urls[protocol], args.seconds, args.warmup))
    return cells, idle


# --- report ----------------------------------------------------------------------------------


def report(cells: list[Cell], idle: dict[str, float], args: argparse.Namespace) -> str:
    by_key = {(c.server, c.model, c.protocol, c.size_mib, c.concurrency): c for c in cells}
    header = ["model", "protocol", "MiB", "c", "Triton MB/s", "workbench MB/s", "ratio",
              "Triton req/s", "workbench req/s", "Triton p50 ms", "workbench p50 ms",
              "Triton peak RSS MiB", "workbench peak RSS MiB"]  # fmt: skip
    rows = []
    models = [PYTHON_MODEL] + ([ONNX_MODEL] if any(c.model == ONNX_MODEL for c in cells) else [])
    for model in models:
        for protocol in PROTOCOLS:
            for size in args.sizes_mib:
                for concurrency in args.concurrency:
                    key = (model, protocol, size, concurrency)
                    theirs = by_key.get((TRITON, *key))
                    ours = by_key[(WORKBENCH, *key)]
                    rows.append([model, protocol, str(size), str(concurrency),
                                 *_pair(theirs, ours, "mb_per_s", 0, with_ratio=True),
                                 *_pair(theirs, ours, "per_s", 1),
                                 *_pair(theirs, ours, "p50_ms", 1),
                                 *_pair(theirs, ours, "peak_rss_mib", 0)])  # fmt: skip
    table = markdown_table(header, rows)
    idle_text = ", ".join(f"{server} {mib:,.0f} MiB" for server, mib in idle.items())
    return (
        f"FP32[n] echoed by `{PYTHON_MODEL}` (Python backend, one instance) on both servers and "
        f"by `{ONNX_MODEL}` (ONNX Runtime, one instance; workbench only: the Triton here has "
        "only the Python backend). Each cell: `c` threads, each with its own tritonclient "
        f"client, in a closed loop for {args.seconds:g} s after {args.warmup} warm-up "
        "request(s) per thread. HTTP: binary tensor extension in and out; gRPC: raw contents. "
        "MB/s counts input and output (1 MB = 10^6 bytes); ratio is workbench / Triton. Peak "
        "RSS: the server's process tree (server and stubs) sampled every 20 ms during the "
        f"cell. Idle RSS before the first cell: {idle_text}.\n\n{table}"
    )


def _pair(theirs: Cell | None, ours: Cell, name: str, digits: int, with_ratio: bool = False):
    def value(cell: Cell | None) -> float | None:
        if cell is None or cell.error:
            return None
        return float(getattr(cell, name))

    def text(number: float | None, cell: Cell | None) -> str:
        if cell is None:
            return "–"
        return "error" if number is None else f"{number:,.{digits}f}"

    a, b = value(theirs), value(ours)
    cells = [text(a, theirs), text(b, ours)]
    if with_ratio:
        cells.append(ratio(b, a))
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--servers", nargs="+", default=["triton", "workbench"])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    info = machine_info()  # the load before anything starts
    work = Path(tempfile.mkdtemp(prefix="large-tensors-"))
    onnx_model = onnx_identity()
    cells: list[Cell] = []
    idle: dict[str, float] = {}
    if "triton" in args.servers:
        peers = prepare()
        repo = write_repository(work / "triton_repo", None)
        log = work / "triton.log"
        with TritonServerProcess(peers, repo, log_path=log, load_models=[PYTHON_MODEL]) as t:
            urls = {"http": t.http_url, "grpc": t.grpc_url}
            found, idle[TRITON] = run_server(TRITON, [PYTHON_MODEL], t.pid, urls, args)
            cells += found
    if "workbench" in args.servers:
        repo = write_repository(work / "workbench_repo", onnx_model)
        models = [PYTHON_MODEL] + ([ONNX_MODEL] if onnx_model is not None else [])
        with workbench_server(repo, work / "workbench.log", models) as ours:
            assert ours.process is not None
            urls = {"http": ours.http_url, "grpc": ours.grpc_url}
            found, idle[WORKBENCH] = run_server(WORKBENCH, models, ours.process.pid, urls, args)
            cells += found
    body = report(cells, idle, args)
    print(body)
    failed = [describe(c) for c in cells if c.error]
    errors = "\n".join(f"- {line}" for line in failed)
    write_report(
        args.markdown or results_path("large_tensors"), "Large tensors", body, info, errors
    )
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cells], indent=1))
    print(f"server logs in {work}")


if __name__ == "__main__":
    main()
