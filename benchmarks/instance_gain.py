"""What more instances of a CPU-bound Python model gain on this machine (issue #17).

A sweep chooses an instance count by how much each added instance gains. On a two-core
machine shared with the load, a second instance of ``transfer.py``'s ``cpu_bound`` model gains
1.1-1.45x on the embedded server and 1.7-2.0x on tritonserver 2.51 (benchmarks/README.md,
"What a second instance gains, design by design"), so the advice differs. Whether that is the
small machine's doing or the server's shows on a machine with a core to spare per instance:
this sweeps ``cpu_bound`` over instance counts at one max_batch_size and concurrency, on
each engine asked for, the engines taking turns, and prints each count's median throughput
and its gain over the first count, with the machine's CPU busy share (``host_cpu``).

``--engines workbench`` needs only this package, so it runs where tritonserver cannot (a
machine without the test peers); the gains are then compared with Triton's from another run.

Usage::

    python benchmarks/instance_gain.py --repeats 3
    python benchmarks/instance_gain.py --engines workbench --instance-counts 1 2 4 --concurrency 16
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import transfer  # noqa: E402
from benchmarks._harness import (  # noqa: E402
    machine_info,
    markdown_table,
    results_path,
    write_report,
)

MODEL = "cpu_bound"
ENGINES = ("workbench", "tritonserver")


def gains(runs: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, float]]:
    """Per instance count (ascending): the median throughput over ``runs`` (each a sweep's rows),
    its gain over the smallest count's median, and the median ``host_cpu``."""
    by_count: dict[int, list[Mapping[str, Any]]] = {}
    for rows in runs:
        for row in rows:
            by_count.setdefault(int(row["instance_count"]), []).append(row)
    table = []
    for count in sorted(by_count):
        rows = by_count[count]
        throughput = statistics.median(float(row["throughput"]) for row in rows)
        base = table[0]["throughput"] if table else throughput
        # a remote server's rows have no host_cpu (None or NaN): a NaN would upset the median
        busy = [float(v) for row in rows if (v := row.get("host_cpu")) is not None and v == v]
        table.append(
            {
                "instance_count": count,
                "throughput": throughput,
                "gain": throughput / base if base else float("nan"),
                "host_cpu": statistics.median(busy) if busy else float("nan"),
            }
        )
    return table


def section(engine: str, runs: Sequence[Sequence[Mapping[str, Any]]]) -> str:
    rows = [
        [
            str(int(entry["instance_count"])),
            f"{entry['throughput']:,.0f}",
            f"{entry['gain']:.2f}x",
            f"{entry['host_cpu']:.2f}",
        ]
        for entry in gains(runs)
    ]
    header = ["instance_count", "infer/s (median)", "over the first count", "host_cpu"]
    sweeps = f"{len(runs)} sweep" + ("" if len(runs) == 1 else "s")
    return f"### {engine} ({sweeps})\n\n" + markdown_table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--instance-counts", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--max-batch-size", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration-s", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    grid = {
        "max_batch_size": [args.max_batch_size],
        "max_queue_delay_microseconds": [0],
        "instance_count": sorted(set(args.instance_counts)),
        "concurrency": [args.concurrency],
    }
    tritonserver = ""
    if "tritonserver" in args.engines:
        from tests.integration.peers import prepare

        tritonserver = str(prepare().tritonserver)
    root = Path(tempfile.mkdtemp(prefix="instance-gain-"))
    runs: dict[str, list[list[dict[str, Any]]]] = {engine: [] for engine in args.engines}
    try:
        repositories = {e: transfer.write_repository(root / e) for e in args.engines}
        for repeat in range(args.repeats):
            for engine in transfer.turns(args.engines, repeat):
                rows = transfer.sweep_once(
                    repositories[engine], MODEL, engine, tritonserver, args.duration_s, grid
                )
                runs[engine].append(rows)
                measured = (f"{row['instance_count']}: {row['throughput']:,.0f}" for row in rows)
                print(f"{engine}, sweep {repeat + 1}: {', '.join(measured)}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sections = [section(engine, engine_runs) for engine, engine_runs in runs.items()]
    notes = (
        f"`{MODEL}` (benchmarks/transfer.py), max_batch_size {args.max_batch_size}, no queue "
        f"delay, concurrency {args.concurrency}, instance counts "
        f"{', '.join(map(str, grid['instance_count']))}; each point {args.duration_s:g} s after "
        "a warm-up, the engines in turns; `host_cpu` is the share of this machine's CPU time "
        "that was busy while the point was measured."
    )
    body = "\n\n".join([notes, *sections])
    print(body, flush=True)
    info = machine_info() | {"python_executable": sys.executable}
    write_report(results_path("instance_gain"), "What more instances gain", body, info, "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
