"""gRPC throughput and p99 latency: real Triton 2.51 against the workbench server, side by side.

Both servers serve a fresh copy of ``tests/assets/conformance_repo`` and load only ``add_one``
(FP32[16] add-one, Python backend, dynamic batching). perf_analyzer drives each with
``-i grpc`` at every requested concurrency (default 1, 8 and 32), one server at a time; the
script prints a markdown table with a ratio row (workbench / Triton) and writes it to
``benchmarks/results/``.

The workbench server runs in its own process (``python -m workbench serve`` with
``--grpc-port``; its gRPC endpoint listens before HTTP reports ready), so that neither the load
generator nor this script shares its GIL. Usage::

    python benchmarks/grpc_throughput.py --concurrency 1 8 32 --measurement-ms 3000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._harness import (  # noqa: E402
    REPO_ROOT,
    TRITON,
    TRITONCLIENT_VERSION,
    WORKBENCH,
    PerfSettings,
    Series,
    errors_section,
    machine_info,
    measure_series,
    results_path,
    workbench_server,
    write_report,
)
from benchmarks.http_throughput import format_table  # noqa: E402
from tests.integration.peers import (  # noqa: E402
    TRITON_VERSION,
    Peers,
    TritonServerProcess,
    copy_repository,
    prepare,
)

SOURCE_REPOSITORY = REPO_ROOT / "tests" / "assets" / "conformance_repo"
MODEL = "add_one"
_LABELS = {"triton": TRITON, "workbench": WORKBENCH}


def run_triton(
    peers: Peers, repository: Path, logs: Path, concurrencies: Sequence[int], settings: PerfSettings
) -> Series:
    series = Series(TRITON, MODEL)
    server = TritonServerProcess(
        peers, repository, log_path=logs / "tritonserver.log", load_models=(MODEL,)
    )
    with server:
        series.startup_s = server.startup_s
        measure_series(
            peers, series, server.grpc_url, concurrencies, settings, "grpc", server.http_url
        )
    return series


def run_workbench(
    peers: Peers, repository: Path, logs: Path, concurrencies: Sequence[int], settings: PerfSettings
) -> Series:
    series = Series(WORKBENCH, MODEL)
    with workbench_server(repository, logs / "workbench.log", (MODEL,)) as server:
        series.startup_s = server.startup_s
        measure_series(
            peers, series, server.grpc_url, concurrencies, settings, "grpc", server.http_url
        )
    return series


def run_server(
    name: str, peers: Peers, workdir: Path, concurrencies: Sequence[int], settings: PerfSettings
) -> Series:
    """Serve a fresh copy of the repository with ``name``; a start failure is recorded."""
    repository = copy_repository(SOURCE_REPOSITORY, workdir / f"repo-{name}")
    runner = run_triton if name == "triton" else run_workbench
    print(f"{name}: starting on a copy of {SOURCE_REPOSITORY.name}", flush=True)
    try:
        return runner(peers, repository, workdir, concurrencies, settings)
    except RuntimeError as error:  # TritonStartError is a RuntimeError too
        print(f"{name}: failed to start: {str(error).splitlines()[0]}", flush=True)
        return Series(_LABELS[name], MODEL, error=str(error))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--max-trials", type=int, default=None)
    parser.add_argument("--servers", nargs="+", choices=("triton", "workbench"),
                        default=["triton", "workbench"])  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write results as JSON")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="default: benchmarks/results/<date>_grpc_throughput.md")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    peers = prepare()
    info = machine_info()
    # gRPC runs on this shared 2-core machine rarely settle at 10%: retry at 25%, then 50%.
    settings = PerfSettings(
        measurement_ms=args.measurement_ms, max_trials=args.max_trials, retry_stability=(25, 50)
    )
    workdir = Path(tempfile.mkdtemp(prefix="grpc-throughput-"))
    results = [
        run_server(name, peers, workdir, args.concurrency, settings) for name in args.servers
    ]
    table = format_table(results, args.concurrency)
    errors = errors_section(results)
    print(f"\n{table}\n\nserver logs: {workdir}")
    if errors:
        print(errors)
    how = settings.describe().replace(
        f"perf_analyzer (tritonclient {TRITONCLIENT_VERSION}) over HTTP",
        f"perf_analyzer (tritonclient {TRITONCLIENT_VERSION}) over gRPC (`-i grpc`)",
    )
    body = (
        f"Model `{MODEL}` from `tests/assets/conformance_repo` (Python backend, dynamic "
        f"batching); {how}; servers run one at a time.\n\n{table}"
    )
    title = f"gRPC throughput: Triton {TRITON_VERSION} vs workbench"
    write_report(args.markdown or results_path("grpc_throughput"), title, body, info, errors)
    if args.json:
        payload = {"machine": info, "results": [asdict(series) for series in results]}
        args.json.write_text(json.dumps(payload, indent=2))
    return 1 if any(series.failed for series in results) else 0


if __name__ == "__main__":
    sys.exit(main())
