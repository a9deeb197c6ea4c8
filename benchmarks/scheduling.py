"""Scheduling (issue #3): dynamic batching on/off and instance counts 1/2, side by side.

Two parts in one run, each against models generated at run time into temporary repositories
(``benchmarks/_scheduling_models.py``):

1. A batch-friendly ONNX MLP (FP32[256], 3 x MatMul 256x256 + Relu, ``max_batch_size: 32``)
   with ``dynamic_batching { max_queue_delay_microseconds: 500 }`` and without it, on the
   workbench only (real Triton from the pytriton wheel has no onnxruntime backend), at
   concurrency 1, 8 and 32: throughput, p99, the server-side average batch size
   (inference_count / execution_count) and the ratio batching / no batching.
2. A CPU-bound Python model (~5 ms of pure-Python loop per request, ``max_batch_size: 0``) with
   ``instance_group { count: 1 }`` and ``count: 2``, on real Triton 2.51 and on the workbench,
   at concurrency 1, 2 and 8: throughput per server and count, count 2 / count 1 per server, and
   workbench / Triton per cell.

perf_analyzer drives every point over HTTP; servers run one at a time. Usage::

    python benchmarks/scheduling.py --json scheduling.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._harness import (  # noqa: E402
    LOOSE_MARKS,
    TRITON,
    WORKBENCH,
    PerfSettings,
    Series,
    errors_section,
    machine_info,
    measure_series,
    model_config,
    results_path,
    workbench_server,
    write_report,
)
from benchmarks._scheduling_models import (  # noqa: E402
    CPU_BURN,
    DEFAULT_BURN_ITERATIONS,
    MLP_BATCHING,
    MLP_NO_BATCHING,
    calibrate_burn,
    time_burn,
    write_burn_repository,
    write_mlp_repository,
)
from benchmarks._scheduling_tables import batching_table, instances_tables  # noqa: E402
from tests.integration.peers import Peers, TritonServerProcess, copy_repository, prepare  # noqa: E402

_LABELS = {"triton": TRITON, "workbench": WORKBENCH}


@dataclass
class SchedulingRun:
    """Everything one run measured, and what it was measured with."""

    settings: dict[str, object]
    batching: list[Series] = field(default_factory=list)
    instances: list[Series] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def series(self) -> list[Series]:
        return self.batching + self.instances


# --- servers ---------------------------------------------------------------------------------


@contextlib.contextmanager
def serving(
    name: str, peers: Peers, repository: Path, log_path: Path, models: Sequence[str]
) -> Iterator[tuple[str, float]]:
    """(``host:port``, startup seconds) of ``name`` serving ``models`` from ``repository``."""
    if name == "triton":
        triton = TritonServerProcess(peers, repository, log_path=log_path, load_models=models)
        with triton:
            yield triton.http_url, triton.startup_s
    else:
        with workbench_server(repository, log_path, models) as workbench:
            yield workbench.http_url, workbench.startup_s


def measure_models(
    name: str,
    peers: Peers,
    repository: Path,
    models: Sequence[str],
    concurrencies: Sequence[int],
    settings: PerfSettings,
) -> tuple[list[Series], list[str]]:
    """One server serving ``models``; every model at every concurrency. A start failure is
    recorded in each series. Also returns notes on configurations the server auto-completed."""
    label = _LABELS[name]
    series = [Series(label, model) for model in models]
    log_path = repository.parent / f"{name}-{repository.name}.log"
    print(f"{name}: serving {', '.join(models)} (log {log_path})", flush=True)
    try:
        with serving(name, peers, repository, log_path, models) as (url, startup_s):
            notes = [_batching_note(label, url, model) for model in models]
            for one in series:
                one.startup_s = startup_s
                measure_series(peers, one, url, concurrencies, settings)
    except RuntimeError as error:  # TritonStartError is a RuntimeError too
        print(f"{name}: failed to start: {str(error).splitlines()[0]}", flush=True)
        for one in series:
            one.error = str(error)
        return series, []
    return series, notes


def _batching_note(server: str, url: str, model: str) -> str:
    """What ``/config`` says about batching and instances: the server's view, not the file's."""
    try:
        config = model_config(url, model)
    except (OSError, ValueError) as error:
        return f"{server} `{model}`: /config unreadable ({error})"
    groups = config.get("instance_group")
    groups = groups if isinstance(groups, list) else []
    counts = [group.get("count") for group in groups if isinstance(group, dict)]
    batching = "dynamic_batching" in config
    return (
        f"{server} `{model}` /config: max_batch_size {config.get('max_batch_size')}, "
        f"dynamic_batching {'present' if batching else 'absent'}, instance counts {counts}"
    )


# --- the two parts ---------------------------------------------------------------------------


def run_batching(
    peers: Peers, workdir: Path, args: argparse.Namespace, settings: PerfSettings
) -> tuple[list[Series], list[str]]:
    """Part 1: the ONNX MLP with and without dynamic batching, on the workbench."""
    repository = write_mlp_repository(
        workdir / "repo-onnx",
        width=args.width,
        layers=args.layers,
        max_batch_size=args.max_batch_size,
        queue_delay_us=args.queue_delay_us,
    )
    models = (MLP_NO_BATCHING, MLP_BATCHING)
    return measure_models("workbench", peers, repository, models, args.onnx_concurrency, settings)


def run_instances(
    peers: Peers, workdir: Path, args: argparse.Namespace, settings: PerfSettings
) -> tuple[list[Series], list[str]]:
    """Part 2: the CPU-bound Python model with one and two instances, on every server."""
    source = write_burn_repository(workdir / "burn-source", args.burn_iterations)
    series: list[Series] = []
    notes: list[str] = []
    for name in args.servers:
        # A fresh copy per server: Triton's stub writes __pycache__ next to model.py.
        repository = copy_repository(source, workdir / f"repo-burn-{name}")
        more, more_notes = measure_models(
            name, peers, repository, list(CPU_BURN.values()), args.python_concurrency, settings
        )
        series += more
        notes += more_notes
    return series, notes


# --- report ----------------------------------------------------------------------------------


def report_body(run: SchedulingRun, args: argparse.Namespace, settings: PerfSettings) -> str:
    """The markdown body: both parts' tables, with what each measures."""
    parts = [f"{settings.describe()}; servers run one at a time."]
    if run.batching:
        parts.append(
            f"## ONNX MLP: dynamic batching on / off (workbench only)\n\n"
            f"FP32[{args.width}] -> {args.layers} x (MatMul {args.width}x{args.width} + Relu), "
            f"`max_batch_size: {args.max_batch_size}`, one CPU instance; `batching` adds "
            f"`dynamic_batching {{ max_queue_delay_microseconds: {args.queue_delay_us} }}`. "
            "Real Triton from the pytriton wheel has no onnxruntime backend, so the workbench is "
            "compared with itself. `avg batch` = server-side inference_count / execution_count "
            "over the point.\n\n" + batching_table(run.batching, args.onnx_concurrency)
        )
    if run.instances:
        throughput, detail = instances_tables(run.instances, args.python_concurrency)
        parts.append(
            f"## CPU-bound Python model: instance count 1 vs 2\n\n"
            f"`execute` runs {args.burn_iterations:,} pure-Python loop iterations per request "
            f"({run.settings['burn_ms_here']:.2f} ms in the benchmark's process), "
            "`max_batch_size: 0`, no dynamic batching; `instance_group { count: 1 }` vs "
            f"`count: 2`.\n\n{throughput}\n\n"
            "p99 and the server-side compute_infer per request (ms): with two instances on "
            f"two free cores compute stays near one instance's.\n\n{detail}"
        )
    if run.notes:
        parts.append("## Configurations as served\n\n" + "\n".join(f"- {n}" for n in run.notes))
    return "\n\n".join(parts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--parts", nargs="+", choices=("batching", "instances"), default=["batching", "instances"])
    add("--onnx-concurrency", type=int, nargs="+", default=[1, 8, 32])
    add("--python-concurrency", type=int, nargs="+", default=[1, 2, 8])
    add("--servers", nargs="+", choices=("triton", "workbench"), default=["triton", "workbench"],
        help="servers for the Python part (the ONNX part runs on the workbench only)")  # fmt: skip
    add("--measurement-ms", type=int, default=2000)
    add("--max-trials", type=int, default=5, help="perf_analyzer --max-trials per attempt")
    add("--retry-stability", type=int, nargs="*", choices=sorted(LOOSE_MARKS), default=[25, 50],
        help="looser --stability-percentage values to retry an unstable point with")  # fmt: skip
    add("--width", type=int, default=256)
    add("--layers", type=int, default=3)
    add("--max-batch-size", type=int, default=32)
    add("--queue-delay-us", type=int, default=500)
    add(
        "--burn-iterations",
        type=int,
        default=DEFAULT_BURN_ITERATIONS,
        help="loop iterations per request of the Python model (fixed: runs stay comparable)",
    )
    add("--burn-ms", type=float, default=None,
        help="instead, calibrate the iterations to this many ms on this machine")  # fmt: skip
    add("--json", type=Path, default=None, help="also write results as JSON")
    add("--markdown", type=Path, default=None,
        help="default: benchmarks/results/<date>_scheduling.md")  # fmt: skip
    return parser.parse_args(argv)


def run_parts(
    peers: Peers, workdir: Path, args: argparse.Namespace, settings: PerfSettings
) -> SchedulingRun:
    if args.burn_ms is not None:
        args.burn_iterations = calibrate_burn(args.burn_ms)
    run = SchedulingRun(
        {
            **asdict(settings),
            "burn_iterations": args.burn_iterations,
            "burn_ms_here": time_burn(args.burn_iterations),
            **{k: getattr(args, k) for k in ("width", "layers", "max_batch_size")},
            "queue_delay_us": args.queue_delay_us,
        }
    )
    if "batching" in args.parts:
        run.batching, notes = run_batching(peers, workdir, args, settings)
        run.notes += notes
    if "instances" in args.parts:
        run.instances, notes = run_instances(peers, workdir, args, settings)
        run.notes += notes
    return run


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    peers = prepare()
    info = machine_info()
    settings = PerfSettings(args.measurement_ms, args.max_trials, tuple(args.retry_stability))
    # Kept after the run: the server logs are the first thing to read when a request fails.
    workdir = Path(tempfile.mkdtemp(prefix="scheduling-"))
    run = run_parts(peers, workdir, args, settings)
    info["loadavg_at_end"] = " ".join(f"{load:.2f}" for load in os.getloadavg())
    body = report_body(run, args, settings)
    errors = errors_section(run.series)
    print(f"\n{body}\n\nserver logs: {workdir}")
    if errors:
        print(errors)
    markdown = args.markdown or results_path("scheduling")
    write_report(markdown, "Scheduling: dynamic batching and instance counts", body, info, errors)
    if args.json:
        payload = {"machine": info, **asdict(run)}
        args.json.write_text(json.dumps(payload, indent=2))
    return 1 if any(series.failed for series in run.series) else 0


if __name__ == "__main__":
    sys.exit(main())
