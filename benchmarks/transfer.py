"""Does a sweep here predict real Triton? The same grid on both engines, one run (issue #17).

Two python models, generated into a temporary repository:

- ``latency_bound``: each ``execute`` waits 2 ms (``time.sleep``) whatever the batch: batching
  and instances pay off through overlap, the server's own CPU hardly matters;
- ``cpu_bound``: pure-Python work, a fixed part per ``execute`` plus a part per row: on two
  cores the server's own CPU competes with the model's processes.

Both are swept with ``Workbench.sweep`` (through tritonclient only, so the same code measures
both engines) over max_batch_size 1/8, max_queue_delay_microseconds 0/3000, instance_count 1/2
and concurrency 1/8: once on the embedded server, once on real tritonserver 2.51
(``engine="tritonserver"``, from the test peers). Printed per model: each point's throughput on
both and their ratio, the rank correlation ρ (Spearman) of the points' throughputs, and the
regret: what the point ``best(p99_ms=...)`` picks here loses on Triton against Triton's own
best under the same bound (issue #17's targets: ρ ≥ 0.95, regret ≤ 5%).

Usage::

    python benchmarks/transfer.py --duration-s 2 --p99-ms 50
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._harness import machine_info, results_path, write_report  # noqa: E402

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 16 ] }} ]
dynamic_batching {{ max_queue_delay_microseconds: 0 }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

MODELS = {
    "latency_bound": """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.002)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)]))
        return responses
""",
    "cpu_bound": """
import triton_python_backend_utils as pb_utils


def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


class TritonPythonModel:
    def execute(self, requests):
        spin(6000)  # the fixed part of a call
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            spin(2000 * x.shape[0])  # the part per row
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)]))
        return responses
""",
}

GRID: dict[str, Any] = {
    "max_batch_size": [1, 8],
    "max_queue_delay_microseconds": [0, 3000],
    "instance_count": [1, 2],
    "concurrency": [1, 8],
}


def write_repository(root: Path) -> Path:
    for name, code in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        (root / name / "1" / "model.py").write_text(code.lstrip())
    return root


def point_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(axis) for axis in GRID)


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's ρ (average ranks for ties)."""

    def ranks(values: Sequence[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        result = [0.0] * len(values)
        start = 0
        while start < len(order):
            end = start
            while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
                end += 1
            for position in range(start, end + 1):
                result[order[position]] = (start + end) / 2
            start = end + 1
        return result

    rx, ry = ranks(xs), ranks(ys)
    mean_x, mean_y = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mean_x) * (b - mean_y) for a, b in zip(rx, ry, strict=True))
    var_x = sum((a - mean_x) ** 2 for a in rx)
    var_y = sum((b - mean_y) ** 2 for b in ry)
    return cov / (var_x * var_y) ** 0.5 if var_x and var_y else float("nan")


def compare(ours: Any, theirs: Any, p99_ms: float) -> dict[str, Any]:
    """Per-point ratios, ρ and the regret of our best point on Triton."""
    mine = {point_key(r): r for r in ours.rows}
    real = {point_key(r): r for r in theirs.rows}
    shared = sorted(set(mine) & set(real), key=str)
    points = [
        (key, float(mine[key]["throughput"]), float(real[key]["throughput"])) for key in shared
    ]
    rho = spearman([p[1] for p in points], [p[2] for p in points])
    chosen = ours.best(p99_ms=p99_ms)
    theirs_best = theirs.best(p99_ms=p99_ms)
    chosen_key = tuple(
        chosen.concurrency if axis == "concurrency" else chosen.settings.get(axis) for axis in GRID
    )
    on_triton = float(real[chosen_key]["throughput"]) if chosen_key in real else float("nan")
    best_on_triton = float(theirs_best.metrics["throughput"])
    regret = 1 - on_triton / best_on_triton if best_on_triton else float("nan")
    return {"points": points, "rho": rho, "chosen": chosen_key, "regret": regret}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=2.0)
    parser.add_argument("--p99-ms", type=float, default=50.0)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args(argv)

    import workbench as wb
    from tests.integration.peers import prepare

    tritonserver = str(prepare().tritonserver)
    root = write_repository(Path(tempfile.mkdtemp(prefix="transfer-")))
    sections = []
    try:
        for name in args.models:
            results = {}
            for engine in ("workbench", "tritonserver"):
                options = {"tritonserver": tritonserver} if engine == "tritonserver" else {}
                bench = wb.Workbench(root, engine=engine, **options)
                try:
                    results[engine] = bench.sweep(
                        name, duration_s=args.duration_s, live=False, **GRID
                    )
                finally:
                    bench.stop()
            found = compare(results["workbench"], results["tritonserver"], args.p99_ms)
            sections.append(_table(name, found, args.p99_ms))
            print(sections[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    body = "\n\n".join(sections)
    write_report(results_path("transfer"), "Sweep transfer", body, machine_info(), "")
    return 0


def _table(name: str, found: dict[str, Any], p99_ms: float) -> str:
    axes = " | ".join(GRID)
    lines = [
        f"### `{name}`",
        "",
        f"| {axes} | workbench infer/s | Triton infer/s | ratio |",
        "| --- " * (len(GRID) + 3) + "|",
    ]
    for key, ours, theirs in found["points"]:
        cells = " | ".join(str(v) for v in key)
        ratio = ours / theirs if theirs else float("nan")
        lines.append(f"| {cells} | {ours:,.0f} | {theirs:,.0f} | {ratio:.2f} |")
    lines += [
        "",
        f"ρ (Spearman, throughput) = {found['rho']:.3f}; best(p99_ms={p99_ms:g}) here = "
        f"{dict(zip(GRID, found['chosen'], strict=True))}, regret on Triton = "
        f"{100 * found['regret']:.1f}%",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
