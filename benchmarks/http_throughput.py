"""HTTP throughput and p99 latency: real Triton 2.51 against the workbench server, side by side.

Both servers serve a fresh copy of the same Python-model repository
(``tests/assets/conformance_repo``) and load only ``add_one`` (FP32[16] add-one, dynamic
batching). perf_analyzer drives each over HTTP at every requested concurrency, one server at a
time, and the script prints a markdown table with a ratio row (workbench / Triton).

The workbench server runs in its own process (``python -m workbench serve``) so that neither
the load generator nor this script shares its GIL. Usage::

    python benchmarks/http_throughput.py --concurrency 1 8 --measurement-ms 3000 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import io
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.integration.peers import (  # noqa: E402
    TRITON_VERSION,
    TRITONCLIENT_VERSION,
    Peers,
    TritonServerProcess,
    copy_repository,
    free_port,
    prepare,
    run_perf_analyzer,
)

SOURCE_REPOSITORY = REPO_ROOT / "tests" / "assets" / "conformance_repo"
MODEL = "add_one"
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
TRITON = "triton 2.51"
WORKBENCH = "workbench"
STRICT_STABILITY = 10  # perf_analyzer's default --stability-percentage
LOOSE_STABILITY = 25
LOOSE_MARK = " †"
_LABELS = {"triton": TRITON, "workbench": WORKBENCH}


@dataclass
class Measurement:
    """One perf_analyzer run: throughput and p99 latency, or the error that stopped it."""

    concurrency: int
    infer_per_s: float | None = None
    p99_ms: float | None = None
    stability_pct: int = 10
    error: str | None = None


@dataclass
class ServerResult:
    """Every concurrency measured against one server."""

    server: str
    startup_s: float = 0.0
    measurements: list[Measurement] = field(default_factory=list)
    error: str | None = None

    def at(self, concurrency: int) -> Measurement | None:
        return next((m for m in self.measurements if m.concurrency == concurrency), None)


# --- perf_analyzer ---------------------------------------------------------------------------


def parse_perf_csv(text: str) -> tuple[float, float]:
    """(inferences/s, p99 ms) from the last row of perf_analyzer's ``-f`` CSV (times in us)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("perf_analyzer wrote an empty CSV")
    row = rows[-1]
    return float(row["Inferences/Second"]), float(row["p99 latency"]) / 1000.0


def measure(peers: Peers, url: str, concurrency: int, measurement_ms: int) -> Measurement:
    """perf_analyzer at ``concurrency``; one retry with a looser stability criterion."""
    measurement = _measure_once(peers, url, concurrency, measurement_ms, STRICT_STABILITY)
    if measurement.error and "stable measurement" in measurement.error:
        measurement = _measure_once(peers, url, concurrency, measurement_ms, LOOSE_STABILITY)
    return measurement


def _measure_once(
    peers: Peers, url: str, concurrency: int, measurement_ms: int, stability_pct: int
) -> Measurement:
    """Run perf_analyzer once; a failure is recorded, not raised."""
    with tempfile.TemporaryDirectory(prefix="perf-") as folder:
        csv_path = Path(folder) / "perf.csv"
        # Stabilize on the average (perf_analyzer's default): stabilizing on p99 rarely
        # converges on 2 cores. The CSV reports p99 either way.
        extra = ["-f", str(csv_path), f"--stability-percentage={stability_pct}"]
        rc, output = run_perf_analyzer(
            MODEL,
            url,
            protocol="http",
            concurrency=concurrency,
            measurement_ms=measurement_ms,
            extra_args=extra,
            peers=peers,
            timeout_s=30 + 12 * measurement_ms / 1000,
        )
        if rc != 0 or not csv_path.exists():
            error = f"perf_analyzer exit {rc}: {output[-2000:]}"
            return Measurement(concurrency, stability_pct=stability_pct, error=error)
        infer_per_s, p99_ms = parse_perf_csv(csv_path.read_text())
    return Measurement(concurrency, infer_per_s, p99_ms, stability_pct)


def measure_all(
    peers: Peers, result: ServerResult, url: str, concurrencies: Sequence[int], ms: int
) -> None:
    for concurrency in concurrencies:
        measurement = measure(peers, url, concurrency, ms)
        print(f"  {result.server} c={concurrency}: {_describe(measurement)}", flush=True)
        result.measurements.append(measurement)


def _describe(measurement: Measurement) -> str:
    if measurement.error is not None:
        return f"FAILED ({measurement.error.strip().splitlines()[-1]})"
    text = f"{measurement.infer_per_s:,.0f} infer/s, p99 {measurement.p99_ms:.2f} ms"
    if measurement.stability_pct != STRICT_STABILITY:
        text += f" (stability {measurement.stability_pct}%)"
    return text


# --- servers ---------------------------------------------------------------------------------


def run_triton(
    peers: Peers, repository: Path, logs: Path, concurrencies: Sequence[int], ms: int
) -> ServerResult:
    """Real tritonserver, loading only ``add_one``."""
    result = ServerResult(TRITON)
    server = TritonServerProcess(
        peers, repository, log_path=logs / "tritonserver.log", load_models=(MODEL,)
    )
    with server:
        result.startup_s = server.startup_s
        measure_all(peers, result, server.http_url, concurrencies, ms)
    return result


class WorkbenchServerProcess:
    """``python -m workbench serve`` on loopback in its own session; stopped by pid."""

    def __init__(self, repository: Path, log_path: Path, startup_timeout_s: float = 60.0) -> None:
        self.repository = repository
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.http_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "workbench", "serve",
            "--model-repository", str(self.repository),
            "--http-port", str(self.http_port), "--http-address", "127.0.0.1",
            "--model-control-mode", "explicit", "--load-model", MODEL,
            "--exit-timeout-secs", "5",
        ]  # fmt: skip

    def start(self) -> None:
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_ready()
        self.startup_s = time.monotonic() - started

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.startup_timeout_s
        url = f"http://{self.http_url}/v2/health/ready"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(self._failure(f"exited with {self.process.returncode}"))
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            time.sleep(0.1)
        raise RuntimeError(self._failure(f"not ready after {self.startup_timeout_s:.0f}s"))

    def _failure(self, what: str) -> str:
        log = self.log_path.read_text(errors="replace")[-4000:]
        return f"workbench server {what}; log {self.log_path}:\n{log}"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, SIGKILL after ``timeout_s``; then the session's leftovers (instance workers)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        # Only processes of the session started above can be in this group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def workbench_server(repository: Path, log_path: Path) -> Iterator[WorkbenchServerProcess]:
    server = WorkbenchServerProcess(repository, log_path)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def run_workbench(
    peers: Peers, repository: Path, logs: Path, concurrencies: Sequence[int], ms: int
) -> ServerResult:
    """The embedded workbench server, as a separate process."""
    result = ServerResult(WORKBENCH)
    with workbench_server(repository, logs / "workbench.log") as server:
        result.startup_s = server.startup_s
        measure_all(peers, result, server.http_url, concurrencies, ms)
    return result


# --- report ----------------------------------------------------------------------------------


def _cell(value: float | None, digits: int) -> str:
    return "error" if value is None else f"{value:,.{digits}f}"


def _ratio(numerator: float | None, denominator: float | None) -> str:
    if numerator is None or not denominator:
        return "n/a"
    return f"{numerator / denominator:.2f}x"


def format_table(results: Sequence[ServerResult], concurrencies: Sequence[int]) -> str:
    """A markdown table, one row per server, then workbench / Triton when both ran."""
    header = ["server"]
    for c in concurrencies:
        header += [f"c={c} infer/s", f"c={c} p99 ms"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for result in results:
        cells = [result.server]
        for c in concurrencies:
            m = result.at(c) or Measurement(c)
            mark = LOOSE_MARK if m.stability_pct != STRICT_STABILITY else ""
            cells += [_cell(m.infer_per_s, 0) + mark, _cell(m.p99_ms, 2) + mark]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _ratio_row(results, concurrencies)
    if LOOSE_MARK in "".join(lines):
        lines += ["", f"{LOOSE_MARK.strip()} unstable at {STRICT_STABILITY}%: measured with "
                  f"`--stability-percentage={LOOSE_STABILITY}`"]  # fmt: skip
    return "\n".join(lines)


def _ratio_row(results: Sequence[ServerResult], concurrencies: Sequence[int]) -> list[str]:
    by_name = {result.server: result for result in results}
    if TRITON not in by_name or WORKBENCH not in by_name:
        return []
    cells = ["ratio workbench / Triton"]
    for c in concurrencies:
        ours = by_name[WORKBENCH].at(c) or Measurement(c)
        theirs = by_name[TRITON].at(c) or Measurement(c)
        cells += [_ratio(ours.infer_per_s, theirs.infer_per_s), _ratio(ours.p99_ms, theirs.p99_ms)]
    return ["| " + " | ".join(cells) + " |"]


def machine_info() -> dict[str, str]:
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "nproc": str(os.cpu_count()),
        # Other work on a 2-core machine skews everything: record it next to the numbers.
        "loadavg_at_start": " ".join(f"{load:.2f}" for load in os.getloadavg()),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "triton": TRITON_VERSION,
        "perf_analyzer": f"tritonclient {TRITONCLIENT_VERSION}",
        "workbench_commit": _git_commit(),
    }


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _git_commit() -> str:
    command = ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"]
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
        if done.returncode == 0:
            return done.stdout.strip()
    return "unknown"


def errors_section(results: Sequence[ServerResult]) -> str:
    """Every recorded failure verbatim (tail of perf_analyzer or server output)."""
    lines: list[str] = []
    for result in results:
        if result.error:
            lines.append(_fenced(result.server, result.error))
        for m in result.measurements:
            if m.error:
                lines.append(_fenced(f"{result.server} c={m.concurrency}", m.error))
    return "\n\n".join(lines)


def _fenced(title: str, text: str) -> str:
    return f"### {title}\n\n```\n{text.strip()}\n```"


def write_markdown(
    path: Path, table: str, info: dict[str, str], measurement_ms: int, errors: str
) -> None:
    machine = "\n".join(f"- {key}: {value}" for key, value in info.items())
    text = (
        f"# HTTP throughput: Triton {TRITON_VERSION} vs workbench\n\n"
        f"Model `{MODEL}` from `tests/assets/conformance_repo` (Python backend, dynamic "
        f"batching), perf_analyzer over HTTP, `--measurement-interval={measurement_ms}`, "
        f"p99 from its CSV; servers run one at a time.\n\n{table}\n\n## Machine\n\n{machine}\n"
    )
    if errors:
        text += f"\n## Errors\n\n{errors}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--measurement-ms", type=int, default=3000)
    parser.add_argument("--servers", nargs="+", choices=("triton", "workbench"),
                        default=["triton", "workbench"])  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write results as JSON")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="default: benchmarks/results/<date>_http_throughput.md")  # fmt: skip
    return parser.parse_args(argv)


def run_server(
    name: str, peers: Peers, workdir: Path, concurrencies: Sequence[int], ms: int
) -> ServerResult:
    """Serve a fresh copy of the repository with ``name``; a start failure is recorded."""
    repository = copy_repository(SOURCE_REPOSITORY, workdir / f"repo-{name}")
    runner = run_triton if name == "triton" else run_workbench
    print(f"{name}: starting on a copy of {SOURCE_REPOSITORY.name}", flush=True)
    try:
        return runner(peers, repository, workdir, concurrencies, ms)
    except RuntimeError as error:  # TritonStartError is a RuntimeError too
        print(f"{name}: failed to start: {str(error).splitlines()[0]}", flush=True)
        return ServerResult(_LABELS[name], error=str(error))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    peers = prepare()
    info = machine_info()
    # Kept after the run: the server logs are the first thing to read when a request fails.
    workdir = Path(tempfile.mkdtemp(prefix="http-throughput-"))
    results = [
        run_server(name, peers, workdir, args.concurrency, args.measurement_ms)
        for name in args.servers
    ]
    table = format_table(results, args.concurrency)
    errors = errors_section(results)
    print(f"\n{table}\n\nserver logs: {workdir}")
    if errors:
        print(errors)
    markdown = args.markdown or RESULTS_DIR / f"{datetime.date.today()}_http_throughput.md"
    write_markdown(markdown, table, info, args.measurement_ms, errors)
    if args.json:
        payload = {"machine": info, "results": [asdict(result) for result in results]}
        args.json.write_text(json.dumps(payload, indent=2))
    failed = any(r.error or any(m.error for m in r.measurements) for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
