"""Run traced calls on real Triton 2.51 and on ours, each call writing the next indexed file.

Shared by the side-by-side trace tests of streams, generate, cache hits and BLS: both servers
traced with ``--trace-config triton,file=<side>/trace/trace.json`` plus ``FLAGS`` (one trace per
file), and per case the file's name, its entries and the call's answer on each side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from tests.integration.peers import Peers, TritonServerProcess
from workbench.bench.trace import read_trace_file
from workbench.server.hosting import Server

#: every request traced, each trace in a file of its own (``trace.json.<n>``)
#: how long a trace file may take to be written whole
FILE_WAIT_S = 30.0
FLAGS = ["level=TIMESTAMPS", "rate=1", "triton,log-frequency=1"]
#: (what is traced, the call on (HTTP port, gRPC address))
Case = tuple[str, Callable[[int, str], Any]]
#: per case: (file name, its entries, the call's answer) of real Triton, then of ours
Found = dict[str, list[tuple[str, list[dict[str, Any]], Any]]]


def wait_for_trace_file(path: Path) -> list[dict[str, Any]]:
    """The entries of a file written whole (one trace per file): tritonserver creates the
    file before it writes the array, so under load a reader can find it empty."""
    deadline = time.monotonic() + FILE_WAIT_S
    while not (path.exists() and path.read_text(errors="replace").rstrip().endswith("]")):
        assert time.monotonic() < deadline, f"{path} was not written"
        time.sleep(0.02)
    return read_trace_file(path)


@contextmanager
def traced_pair(
    peers: Peers,
    workdir: Path,
    repository: Callable[[Path], Path],
    real_args: Sequence[str] = (),
    flags: Sequence[str] = FLAGS,
    **ours: Any,
) -> Iterator[list[tuple[int, str, Path]]]:
    """(HTTP port, gRPC address, trace file) of real Triton, then of ours, both serving
    ``repository(<side folder>)`` with ``--trace-config triton,file=<side>/trace/trace.json``
    and ``flags``; ``real_args`` and ``ours`` add to each server's options."""
    files = {}
    for side in ("real", "ours"):
        (workdir / side / "trace").mkdir(parents=True)
        files[side] = workdir / side / "trace" / "trace.json"
    trace_args = [f"triton,file={files['real']}", *flags]
    real = TritonServerProcess(
        peers,
        repository(workdir / "real" / "repo"),
        log_path=workdir / "tritonserver.log",
        extra_args=[*(arg for flag in trace_args for arg in ("--trace-config", flag)), *real_args],
    )
    server = Server(
        repository(workdir / "ours" / "repo"),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=["*"],
        trace_config=[f"triton,file={files['ours']}", *flags],
        **ours,
    )
    with ExitStack() as stack, ThreadPoolExecutor(1) as pool:
        starting = pool.submit(real.start)
        stack.callback(real.stop)
        server.start()
        stack.callback(server.stop)
        starting.result()
        yield [
            (real.http_port, real.grpc_url, files["real"]),
            (server.http_port, server.grpc_url, files["ours"]),
        ]


def run_cases(pair: Any, cases: Sequence[Case]) -> Found:
    """Each case on each side of ``pair`` (a ``traced_pair``), in order."""
    found: Found = {name: [] for name, _ in cases}
    with pair as sides:
        for port, address, base in sides:
            for index, (name, call) in enumerate(cases):
                answer = call(port, address)
                path = base.with_name(f"{base.name}.{index}")
                found[name].append((path.name, wait_for_trace_file(path), answer))
    return found
