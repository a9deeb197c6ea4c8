"""Who waits for a CPU, and how long: one perf_analyzer point on both engines (issue #17).

Where a model's processes and the server share few cores, throughput depends less on how much
CPU each process uses than on how long each one waits, runnable, for a core, and how long the
cores stay idle while work waits for a process that is asleep. This prints, for the server
and for its model processes (all their threads), per inference: CPU time and run-queue wait
(``/proc/<pid>/task/*/schedstat``) and context switches (``/proc/<pid>/task/*/status``; the
model processes' per execution); and the machine's idle time (idle and iowait of all CPUs
together, ``/proc/stat``). The load generator's own CPU is in neither column. One point, on
the embedded server and on tritonserver 2.51, taking turns.

The default point is where a sweep here predicts real Triton worst (benchmarks/README.md,
"`cpu_waits.py`: who waits for a CPU"): ``transfer.py``'s ``cpu_bound`` model,
max_batch_size 1, two instances, HTTP, concurrency 8.

Usage::

    python benchmarks/cpu_waits.py --repeats 2
    python benchmarks/cpu_waits.py --instance-count 1 --protocol grpc
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import transfer  # noqa: E402
from benchmarks._harness import (  # noqa: E402
    ModelCounters,
    child_pids,
    machine_info,
    markdown_table,
    results_path,
    workbench_server,
    write_report,
)
from tests.integration.peers import (  # noqa: E402
    Peers,
    TritonServerProcess,
    prepare,
    run_perf_analyzer,
)
from workbench.cpu_times import IDLE, read_cpu_times  # noqa: E402

MODEL = "cpu_bound"
ENGINES = ("workbench", "triton")


@dataclass(frozen=True)
class Scheduling:
    """What the scheduler did for a set of threads so far (``/proc`` counters)."""

    run_ns: int = 0
    wait_ns: int = 0
    voluntary: int = 0
    involuntary: int = 0

    def __add__(self, other: Scheduling) -> Scheduling:
        return Scheduling(
            self.run_ns + other.run_ns,
            self.wait_ns + other.wait_ns,
            self.voluntary + other.voluntary,
            self.involuntary + other.involuntary,
        )

    def __sub__(self, other: Scheduling) -> Scheduling:
        return Scheduling(
            self.run_ns - other.run_ns,
            self.wait_ns - other.wait_ns,
            self.voluntary - other.voluntary,
            self.involuntary - other.involuntary,
        )


def thread_scheduling(task: Path) -> Scheduling:
    """One thread's counters (``task`` is ``/proc/<pid>/task/<tid>``)."""
    run_ns, wait_ns, _slices = (int(field) for field in (task / "schedstat").read_text().split())
    switches: dict[str, int] = {}
    for line in (task / "status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
            switches[name] = int(value)
    return Scheduling(
        run_ns,
        wait_ns,
        switches.get("voluntary_ctxt_switches", 0),
        switches.get("nonvoluntary_ctxt_switches", 0),
    )


#: what each thread of some processes did so far, by (pid, tid)
Threads = dict[tuple[int, int], Scheduling]


def read_threads(pids: Iterable[int]) -> Threads:
    """The counters of every live thread of ``pids`` (one that ends meanwhile is left out)."""
    found: Threads = {}
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except FileNotFoundError:  # the process ended
            continue
        for task in tasks:
            try:
                found[pid, int(task.name)] = thread_scheduling(task)
            except (FileNotFoundError, ProcessLookupError):  # the thread ended
                continue
    return found


def used_between(before: Threads, after: Threads) -> Scheduling:
    """What the threads alive at ``after`` did since ``before`` (one born in between from
    zero); what a thread that ended in between did in the window is lost."""
    zero = Scheduling()
    return sum((after[key] - before.get(key, zero) for key in after), zero)


def idle_s() -> float:
    """The machine's idle and iowait seconds so far, all CPUs together."""
    times = read_cpu_times()
    if times is None:
        raise SystemExit("this benchmark reads /proc/stat (Linux only)")
    return sum(times[field] for field in IDLE) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Point:
    """Where to measure: the model's settings, the load, and the interpreters."""

    instance_count: int
    max_batch_size: int
    protocol: str
    concurrency: int
    window_s: float
    #: ``EXECUTION_ENV_PATH`` for the workbench's model (None: the server's interpreter)
    execution_env: str | None = None
    #: the interpreter of the workbench's server (None: this one)
    python: str | None = None


@dataclass(frozen=True)
class Sample:
    """One window on one engine."""

    engine: str
    inferences: int
    executions: int
    window_s: float
    idle_s: float
    server: Scheduling
    models: Scheduling

    def row(self) -> list[str]:
        n = max(self.inferences, 1)

        def us(ns: int) -> str:
            return f"{ns / 1e3 / n:.0f}"

        return [
            self.engine,
            f"{self.inferences / self.window_s:,.0f}",
            f"{self.inferences / max(self.executions, 1):.2f}",
            f"{self.idle_s * 1e6 / n:.0f}",
            us(self.server.run_ns),
            us(self.server.wait_ns),
            f"{self.server.voluntary / n:.2f} / {self.server.involuntary / n:.2f}",
            us(self.models.run_ns),
            us(self.models.wait_ns),
            f"{self.models.voluntary / max(self.executions, 1):.2f}"
            f" / {self.models.involuntary / max(self.executions, 1):.2f}",
        ]


HEADER = [
    "engine",
    "infer/s",
    "batch",
    "machine idle (all CPUs) µs/inf",
    "server CPU µs/inf",
    "server run-queue wait µs/inf",
    "server switches /inf (voluntary / involuntary)",
    "model processes CPU µs/inf",
    "their run-queue wait µs/inf",
    "their switches /execution (voluntary / involuntary)",
]


def write_model(root: Path, point: Point, execution_env: str | None) -> Path:
    """A repository with ``cpu_bound`` configured for ``point``."""
    transfer.write_model(
        root,
        MODEL,
        execution_env,
        max_batch_size=point.max_batch_size,
        count=point.instance_count,
    )
    return root


@dataclass(frozen=True)
class Served:
    """A running server: its pid and addresses."""

    pid: int
    http_url: str
    grpc_url: str


@contextmanager
def serving(
    engine: str, repository: Path, logs: Path, peers: Peers, python: str | None = None
) -> Iterator[Served]:
    """The engine's server, serving ``cpu_bound``; stopped on exit."""
    if engine == "triton":
        triton = TritonServerProcess(
            peers, repository, log_path=logs / "tritonserver.log", load_models=(MODEL,)
        )
        with triton:
            yield Served(triton.pid, triton.http_url, triton.grpc_url)
    else:
        ours_log = logs / "workbench.log"
        with workbench_server(repository, ours_log, (MODEL,), python=python) as ours:
            assert ours.process is not None
            yield Served(ours.process.pid, ours.http_url, ours.grpc_url)


@dataclass(frozen=True)
class Reading:
    """The counters of one moment."""

    at_s: float
    model: ModelCounters
    idle_s: float
    server: Threads
    models: Threads


def read(engine: str, served: Served) -> Reading:
    model = ModelCounters.read(served.http_url, MODEL)
    if model is None:
        raise SystemExit(f"{engine}: the model's statistics could not be read")
    # the model processes are listed at each reading: one started in between counts from zero
    models = read_threads(child_pids(served.pid))
    return Reading(time.monotonic(), model, idle_s(), read_threads([served.pid]), models)


def measure(engine: str, served: Served, point: Point, peers: Peers) -> Sample:
    """Load the server with perf_analyzer and read the counters around ``window_s`` of it."""
    url = served.http_url if point.protocol == "http" else served.grpc_url
    outcome: list[tuple[int, str]] = []
    load = threading.Thread(
        target=lambda: outcome.append(
            run_perf_analyzer(
                MODEL,
                url,
                point.protocol,
                point.concurrency,
                # one window longer than ours, which starts once requests flow
                int((point.window_s + LOAD_START_S + 5) * 1000),
                extra_args=["--max-trials=1"],
                peers=peers,
                timeout_s=120,
            )
        )
    )
    load.start()
    try:
        before = _once_serving(engine, served, load)
        time.sleep(point.window_s)
        after = read(engine, served)
        if not load.is_alive():
            raise SystemExit(f"{engine}: the load ended before the window did: {outcome}")
    finally:
        load.join()
    counted = after.model.minus(before.model)
    if counted.inferences <= 0:
        raise SystemExit(f"{engine}: no inference in the window: {outcome}")
    return Sample(
        engine,
        counted.inferences,
        counted.executions,
        after.at_s - before.at_s,
        after.idle_s - before.idle_s,
        used_between(before.server, after.server),
        used_between(before.models, after.models),
    )


#: how long perf_analyzer may take to send its first requests
LOAD_START_S = 20.0


def _once_serving(engine: str, served: Served, load: threading.Thread) -> Reading:
    """The first reading after requests began to flow (perf_analyzer starts in a second or
    two, then reads the model's metadata), and one more second to settle."""
    first = read(engine, served)
    deadline = first.at_s + LOAD_START_S
    while read(engine, served).model.inferences == first.model.inferences:
        if not load.is_alive() or time.monotonic() > deadline:
            raise SystemExit(f"{engine}: perf_analyzer sent no request")
        time.sleep(0.1)
    time.sleep(1.0)
    return read(engine, served)


def run(point: Point, repeats: int, peers: Peers, workdir: Path) -> list[Sample]:
    """Both engines up together; each repeat measures one right after the other, the first
    alternating, so that both see the same spell of the machine."""
    samples = []
    mine = write_model(workdir / "ours", point, point.execution_env)
    theirs = write_model(workdir / "triton", point, None)
    with serving("workbench", mine, workdir, peers, point.python) as ours:
        with serving("triton", theirs, workdir, peers) as real:
            servers = {"workbench": ours, "triton": real}
            print(" | ".join(HEADER), flush=True)
            for turn in range(repeats):
                order = ENGINES if turn % 2 == 0 else ENGINES[::-1]
                for engine in order:
                    samples.append(measure(engine, servers[engine], point, peers))
                    print(" | ".join(samples[-1].row()), flush=True)
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance-count", type=int, default=2)
    parser.add_argument("--max-batch-size", type=int, default=1)
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--window-s", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument(
        "--execution-env",
        help="EXECUTION_ENV_PATH for the workbench's model: a Python environment (folder or "
        "conda-pack archive), e.g. a venv of another interpreter with numpy",
    )
    parser.add_argument("--python", help="the interpreter of the workbench's server")
    args = parser.parse_args(argv)
    point = Point(
        args.instance_count,
        args.max_batch_size,
        args.protocol,
        args.concurrency,
        args.window_s,
        args.execution_env,
        args.python,
    )
    with tempfile.TemporaryDirectory() as tmp:
        samples = run(point, args.repeats, prepare(), Path(tmp))
    body = (
        f"`{MODEL}` (benchmarks/transfer.py), max_batch_size {point.max_batch_size}, "
        f"{point.instance_count} instance(s), {point.protocol.upper()} c={point.concurrency}, "
        f"perf_analyzer, {point.window_s:g}-s windows, the engines in turns; the machine's idle "
        "time is that of all CPUs together, and the load generator's CPU is in no column; "
        "the workbench's "
        f"server on {point.python or sys.executable}, its model processes on "
        f"{point.execution_env or 'the same'} (Triton's stubs link their own libpython).\n\n"
        + markdown_table(HEADER, [sample.row() for sample in samples])
    )
    print(body)
    path = args.markdown or results_path("cpu_waits")
    write_report(path, "Who waits for a CPU", body, machine_info(), "")
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
