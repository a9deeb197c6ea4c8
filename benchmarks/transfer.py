"""Does a sweep here predict real Triton? The same grid on both engines, one run (issue #17).

Two python models, generated into a temporary repository:

- ``latency_bound``: each ``execute`` waits 2 ms (``time.sleep``) whatever the batch: batching
  and instances pay off through overlap, the server's own CPU hardly matters;
- ``cpu_bound``: pure-Python work, a fixed part per ``execute`` plus a part per row: on two
  cores the server's own CPU competes with the model's processes.

Both are swept with the sweep machinery ``Workbench.sweep`` runs (the load through Triton's
public API only, so the same code measures both engines) over max_batch_size 1/8,
max_queue_delay_microseconds 0/3000, instance_count 1/2 and concurrency 1/8, on the embedded
server and on real tritonserver 2.51 (``engine="tritonserver"``, from the test peers).

One sweep of each is not enough on a shared machine: Triton's own throughput at one point moves
by a third between runs (2026-11-26: 912 to 1,455 infer/s at the same point), more than the
differences between most points. So the sweeps are repeated (``--repeats``), the engines taking
turns (ABBA...), and each point keeps its median run. Triton against itself gives the noise
floor: the rank correlation of two of its own runs, and the regret of the point its first run
picks. With ``--control`` a second, independent set of Triton sweeps takes turns with the other
two, and Triton's medians are compared with those of its own second set the same way ours are:
the ρ and regret a perfect copy of Triton would get on this machine with as many runs.

Printed per model: each point's median throughput on both and their ratio, the average batch
size each scheduler formed (the statistics extension), the server's CPU per inference (our
process, or tritonserver's; model processes not counted) and the stubs', the rank correlation
ρ (Spearman) of the points' throughputs, and the regret: what the point ``best(p99_ms=...)``
picks here loses on Triton against Triton's own best under the same bound (issue #17's targets:
ρ ≥ 0.95, regret ≤ 5%).

Many points of this grid are the same server behaviour (at concurrency 1 the instance count
changes nothing, nor does the delay with max_batch_size 1): their order is a coin toss on
either engine, which caps plain ρ near 0.94 even for two identical engines
(benchmarks/README.md, "Ties in the grid"). So ρ is printed twice: plain, and with near-ties,
where points whose medians on an engine are not told apart by that engine's own run-to-run
noise share their rank (``tie_ranks``).

Every sweep's rows are saved as JSON beside the report; ``--from-json`` prints the report
again from such a file without running anything.

Usage::

    python benchmarks/transfer.py --duration-s 2 --p99-ms 50 --repeats 3
    python benchmarks/transfer.py --duration-s 2 --p99-ms 50 --repeats 5 --control
    python benchmarks/transfer.py --from-json benchmarks/results/<date>_transfer.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
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


def write_model(root: Path, name: str, execution_env: str | None = None, **settings: int) -> None:
    """One of ``MODELS`` under ``root``; with ``execution_env``, it runs in that Python
    environment (``EXECUTION_ENV_PATH``); ``settings`` (``max_batch_size``, ``count``)
    replace the config's defaults."""
    config = CONFIG.format(name=name)
    for key, value in settings.items():
        config, found = re.subn(rf"\b{key}: \d+", f"{key}: {value}", config)
        if found != 1:
            raise ValueError(f"the config has no single '{key}' to set")
    if execution_env is not None:
        value_text = f'value {{ string_value: "{execution_env}" }}'
        config += f'parameters {{ key: "EXECUTION_ENV_PATH" {value_text} }}\n'
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(MODELS[name].lstrip())


def write_repository(root: Path, execution_env: str | None = None) -> Path:
    """The two models under ``root``; with ``execution_env``, both run in that Python
    environment (``EXECUTION_ENV_PATH``)."""
    for name in MODELS:
        write_model(root, name, execution_env)
    return root


def ranks(values: Sequence[float]) -> list[float]:
    """Each value's rank (0 for the smallest), equal values sharing their average rank."""
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


def tie_ranks(medians: Sequence[float], errors: Sequence[float], z: float = 2.0) -> list[float]:
    """Ranks where points the noise cannot tell apart share theirs: in order of median, a
    point joins the group of the lowest one before it unless their difference is more than
    ``z`` standard errors of it (``errors``: each median's standard error)."""
    order = sorted(range(len(medians)), key=lambda i: medians[i])
    groups: list[list[int]] = []
    for index in order:
        if groups:
            lead = groups[-1][0]
            spread = z * (errors[lead] ** 2 + errors[index] ** 2) ** 0.5
            if medians[index] - medians[lead] <= spread:
                groups[-1].append(index)
                continue
        groups.append([index])
    result = [0.0] * len(medians)
    start = 0
    for group in groups:
        for index in group:
            result[index] = start + (len(group) - 1) / 2
        start += len(group)
    return result


def correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Pearson's correlation (of ranks: Spearman's ρ); NaN where either side is constant."""
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:
        return float("nan")


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's ρ (average ranks for ties)."""
    return correlation(ranks(xs), ranks(ys))


def median_error(values: Sequence[float]) -> tuple[float, float]:
    """The median of one point's runs and its standard error, from their median absolute
    deviation (robust to the odd run a stall slowed): 1.4826 MAD estimates one run's σ, and
    the median of n runs has about 1.2533 σ / √n. (NaN error for fewer than three runs.)"""
    median = statistics.median(values)
    if len(values) < 3:
        return median, float("nan")
    mad = statistics.median([abs(value - median) for value in values])
    return median, 1.2533 * 1.4826 * mad / len(values) ** 0.5


def near_tie_rho(
    ours: Sequence[Sequence[dict[str, Any]]], theirs: Sequence[Sequence[dict[str, Any]]]
) -> float:
    """ρ between two engines' runs of the same grid, each engine's near-ties (``tie_ranks``
    with its own run-to-run noise) sharing their rank. NaN without three runs on each."""
    noise = []
    for runs in (ours, theirs):
        by_point: dict[tuple[Any, ...], list[float]] = {}
        for rows in runs:
            for row in rows:
                by_point.setdefault(point_key(row), []).append(float(row["throughput"]))
        noise.append({key: median_error(values) for key, values in by_point.items()})
    shared = sorted(set(noise[0]) & set(noise[1]), key=str)
    sides = []
    for side in noise:
        medians = [side[key][0] for key in shared]
        errors = [side[key][1] for key in shared]
        if any(error != error for error in errors):  # NaN: too few runs to know the noise
            return float("nan")
        sides.append(tie_ranks(medians, errors))
    return correlation(*sides)


def median_rows(runs: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per point (configuration and concurrency), the run with the median throughput."""
    by_point: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rows in runs:
        for row in rows:
            by_point.setdefault(point_key(row), []).append(row)
    chosen = []
    for rows in by_point.values():
        ordered = sorted(rows, key=lambda row: float(row["throughput"]))
        chosen.append(ordered[(len(ordered) - 1) // 2])
    return chosen


def point_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(row.get(axis) for axis in GRID)


def compare(
    ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]], p99_ms: float
) -> dict[str, Any]:
    """Per-point pairs, ρ and the regret on ``theirs`` of the best point of ``ours``."""
    from workbench.bench.selection import select_best

    mine = {point_key(r): r for r in ours}
    real = {point_key(r): r for r in theirs}
    shared = sorted(set(mine) & set(real), key=str)
    rho = spearman(
        [float(mine[k]["throughput"]) for k in shared],
        [float(real[k]["throughput"]) for k in shared],
    )
    chosen = point_key(select_best(list(ours), p99_ms=p99_ms))
    best_there = float(select_best(list(theirs), p99_ms=p99_ms)["throughput"])
    on_there = float(real[chosen]["throughput"]) if chosen in real else float("nan")
    regret = 1 - on_there / best_there if best_there else float("nan")
    pairs = [(key, mine[key], real[key]) for key in shared]
    return {"pairs": pairs, "rho": rho, "chosen": chosen, "regret": regret}


class CpuMeter:
    """CPU seconds of this process, of the tritonserver it started and of every model process
    (Python stubs), read at each sweep row: a row's CPU per inference is the difference from
    the row before it at the same configuration (no reload or warm-up in between)."""

    def __init__(self) -> None:
        import psutil

        self._me = psutil.Process()
        self._error = psutil.Error
        self.readings: list[dict[str, float]] = []

    def read(self, _progress: Any = None) -> None:
        totals = {"server": 0.0, "stubs": 0.0}
        for process in [self._me, *self._me.children(recursive=True)]:
            try:
                command = " ".join(process.cmdline())
                times = process.cpu_times()
            except self._error:
                continue
            if "workbench.bench.load_process" in command:
                continue  # the load generator: the same client on both engines
            group = "server" if process is self._me or "tritonserver " in command else "stubs"
            totals[group] += times.user + times.system
        self.readings.append(totals)

    def annotate(self, rows: Sequence[dict[str, Any]]) -> None:
        """Add ``server_cpu_us`` / ``stubs_cpu_us`` per inference to ``rows`` (NaN where the
        row before it was another configuration)."""
        for index, row in enumerate(rows):
            same = index > 0 and rows[index - 1]["config"] == row["config"]
            for group in ("server", "stubs"):
                used = self.readings[index][group] - self.readings[index - 1][group] if same else 0
                row[f"{group}_cpu_us"] = (
                    1e6 * used / row["requests"] if same and row["requests"] else float("nan")
                )


def sweep_once(
    root: Path,
    model: str,
    engine: str,
    tritonserver: str,
    duration_s: float,
    grid: Mapping[str, Sequence[Any]] | None = None,
) -> list[dict[str, Any]]:
    """One sweep of ``model`` over ``grid`` (``GRID`` when None) on ``engine``; its rows with
    CPU columns."""
    import workbench as wb
    from workbench.bench.runner import Endpoints, SweepSpec
    from workbench.bench.sweep import start

    options = {"tritonserver": tritonserver} if engine == "tritonserver" else {}
    bench = wb.Workbench(root, engine=engine, **options)
    try:
        axes = GRID if grid is None else grid
        settings = {axis: list(values) for axis, values in axes.items() if axis != "concurrency"}
        spec = SweepSpec.plan(
            model,
            bench.model_dir(model),
            settings=settings,
            concurrency=list(axes["concurrency"]),
            duration_s=duration_s,
        )
        repository = None if bench.remote else bench.repository  # as Workbench.sweep does
        endpoints = Endpoints(bench.server.http_address, repository, bench.grpc_url)
        meter = CpuMeter()
        result = start(spec, endpoints, listeners=[meter.read], bench=bench)
        rows = [dict(row) for row in result.rows]
    finally:
        bench.stop()
    meter.annotate(rows)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=2.0)
    parser.add_argument("--p99-ms", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=3, help="sweeps per engine (odd)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--label", default="", help="added to the results file's name")
    parser.add_argument(
        "--control",
        action="store_true",
        help="also run a second, independent set of Triton sweeps (as many, in turns with the "
        "others) and compare Triton with it as with the workbench: the ρ and regret of Triton "
        "against itself at the same number of runs",
    )
    parser.add_argument(
        "--execution-env",
        help="a Python environment (folder or conda-pack archive) for both models on the "
        "workbench (EXECUTION_ENV_PATH), e.g. the model's production environment; default: "
        "sys.executable. Triton's default stub embeds the system's shared libpython, which "
        "runs pure Python slower than Debian's static /usr/bin/python3 (README: 'Sweeping a "
        "CPU-bound Python model?')",
    )
    parser.add_argument(
        "--from-json",
        type=Path,
        help="print the report of a run saved before (its .json) instead of running",
    )
    args = parser.parse_args(argv)
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        for name, saved_runs in saved["runs"].items():
            print(_section(name, saved_runs, saved["p99_ms"]), flush=True)
        return 0

    from tests.integration.peers import prepare

    tritonserver = str(prepare().tritonserver)
    # Triton's stub embeds the system's libpython whatever the model's environment (and the
    # pytriton build here fails to import numpy under any EXECUTION_ENV_PATH, 2026-11-26):
    # the environment is given to the workbench's models only.
    root = Path(tempfile.mkdtemp(prefix="transfer-"))
    roots = {
        "workbench": write_repository(root / "workbench", args.execution_env),
        "tritonserver": write_repository(root / "tritonserver"),
    }
    sections = []
    every_run: dict[str, dict[str, list[list[dict[str, Any]]]]] = {}
    try:
        for name in args.models:
            arms = (*ENGINES, CONTROL) if args.control else ENGINES
            runs: dict[str, list[list[dict[str, Any]]]] = {arm: [] for arm in arms}
            every_run[name] = runs
            for repeat in range(args.repeats):
                for arm in turns(arms, repeat):
                    engine = "tritonserver" if arm == CONTROL else arm
                    rows = sweep_once(roots[engine], name, engine, tritonserver, args.duration_s)
                    runs[arm].append(rows)
            sections.append(_section(name, runs, args.p99_ms))
            print(sections[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    notes = (
        f"## Run\n\n`python benchmarks/transfer.py --duration-s {args.duration_s:g} "
        f"--p99-ms {args.p99_ms:g} --repeats {args.repeats}"
        + (f" --execution-env {args.execution_env}" if args.execution_env else "")
        + (" --control" if args.control else "")
        + f"`: each point {args.duration_s:g} s "
        "after a warm-up, the median of the runs. "
        + (
            f"The workbench's models have `EXECUTION_ENV_PATH` {args.execution_env} "
            "(`--execution-env`): the model processes here run on its interpreter; Triton's "
            "stubs on the libpython they link."
            if args.execution_env
            else "The model processes here run on the interpreter below (`sys.executable`); "
            "Triton's stubs on the libpython they link."
        )
    )
    info = machine_info() | {"python_executable": sys.executable}
    if args.execution_env:
        info["execution_env"] = args.execution_env
    body = "\n\n".join([*sections, notes])
    report = results_path(f"transfer_{args.label}" if args.label else "transfer")
    write_report(report, "Sweep transfer", body, info, "")
    saved = {"p99_ms": args.p99_ms, "machine": info, "runs": every_run}
    report.with_suffix(".json").write_text(json.dumps(saved, indent=1, default=_plain))
    return 0


ENGINES = ("workbench", "tritonserver")
CONTROL = "tritonserver_control"  # the second set of Triton sweeps of ``--control``


def turns(arms: Sequence[str], repeat: int) -> list[str]:
    """The order the arms run in at ``repeat``: every other repeat the one before reversed, and
    rotated by one after each such pair (two arms: AB BA BA AB; three: all six orders in six
    repeats), so that each arm runs as often before as after each other arm and a machine that
    slows or speeds up during a repeat favours none of them."""
    shift = (repeat // 2) % len(arms)
    order = [*arms[shift:], *arms[:shift]]
    return order[::-1] if repeat % 2 else order


def _plain(value: Any) -> Any:
    """A row's value JSON does not know (a numpy number, say) as a plain one."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)


def _section(name: str, runs: Mapping[str, list[list[dict[str, Any]]]], p99_ms: float) -> str:
    ours, theirs = median_rows(runs["workbench"]), median_rows(runs["tritonserver"])
    found = compare(ours, theirs, p99_ms)
    lines = [f"### `{name}`", "", _header()]
    for key, mine, real in found["pairs"]:
        lines.append(_line(key, mine, real))
    chosen = dict(zip(GRID, found["chosen"], strict=True))
    lines += [
        "",
        f"ρ (Spearman, throughput) = {found['rho']:.3f}; with near-ties "
        f"= {near_tie_rho(runs['workbench'], runs['tritonserver']):.3f}; "
        f"best(p99_ms={p99_ms:g}) here = {chosen}, regret on Triton = "
        f"{100 * found['regret']:.1f}%",
    ]
    triton_runs = runs["tritonserver"]
    if len(triton_runs) > 1:  # the noise floor: Triton's first run against Triton's median
        own = compare(triton_runs[0], theirs, p99_ms)
        pairwise = [
            compare(a, b, p99_ms)["rho"]
            for i, a in enumerate(triton_runs)
            for b in triton_runs[i + 1 :]
        ]
        lines.append(
            f"Triton against itself: ρ between its runs {min(pairwise):.3f}-{max(pairwise):.3f}; "
            f"the point its first run picks loses {100 * own['regret']:.1f}% on its median"
        )
    if runs.get(CONTROL):
        lines.append(_control_line(runs, theirs, p99_ms))
    return "\n".join(lines)


def _control_line(
    runs: Mapping[str, list[list[dict[str, Any]]]], theirs: Sequence[dict[str, Any]], p99_ms: float
) -> str:
    """Triton's medians against those of its second set of sweeps, judged as ours are."""
    control = runs[CONTROL]
    found = compare(median_rows(control), theirs, p99_ms)
    return (
        f"Control, Triton's medians against a second set of {len(control)} Triton sweeps taken "
        f"in turns: ρ = {found['rho']:.3f}; with near-ties = "
        f"{near_tie_rho(control, runs['tritonserver']):.3f}; the point the second set picks "
        f"loses {100 * found['regret']:.1f}% on Triton's medians"
    )


def _header() -> str:
    columns = [
        *GRID,
        "workbench infer/s",
        "Triton infer/s",
        "ratio",
        "batch here",
        "batch Triton",
        "server CPU µs/inf here",
        "Triton",
        "stubs CPU µs/inf here",
        "Triton",
    ]
    return "| " + " | ".join(columns) + " |\n" + "| --- " * len(columns) + "|"


def _line(key: tuple[Any, ...], mine: Mapping[str, Any], real: Mapping[str, Any]) -> str:
    ours, theirs = float(mine["throughput"]), float(real["throughput"])
    ratio = ours / theirs if theirs else float("nan")
    cells = [
        *(str(v) for v in key),
        f"{ours:,.0f}",
        f"{theirs:,.0f}",
        f"{ratio:.2f}",
        f"{mine.get('avg_batch', float('nan')):.1f}",
        f"{real.get('avg_batch', float('nan')):.1f}",
        f"{mine.get('server_cpu_us', float('nan')):.0f}",
        f"{real.get('server_cpu_us', float('nan')):.0f}",
        f"{mine.get('stubs_cpu_us', float('nan')):.0f}",
        f"{real.get('stubs_cpu_us', float('nan')):.0f}",
    ]
    return "| " + " | ".join(cells) + " |"


if __name__ == "__main__":
    sys.exit(main())
