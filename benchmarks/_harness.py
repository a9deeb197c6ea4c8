"""What the side-by-side benchmarks share: perf_analyzer runs, server processes, the report.

- :func:`measure` runs perf_analyzer (``tests.integration.peers``) once per point, retries once
  with looser stability criteria, and reads the model's statistics before and after, so that
  every :class:`Measurement` also carries the server-side average batch size.
- :class:`WorkbenchServerProcess` runs ``python -m workbench serve`` in its own session (neither
  the load generator nor the benchmark shares its GIL) and stops it by pid.
- :func:`markdown_table`, :func:`machine_info`, :func:`errors_section` and :func:`write_report`
  format what the scripts print and write to ``benchmarks/results/``.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.integration.peers import (  # noqa: E402
    TRITON_VERSION,
    TRITONCLIENT_VERSION,
    Peers,
    free_port,
    run_perf_analyzer,
    wait_ready,
)
from workbench.export.triton_process import stop_session  # noqa: E402

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
TRITON = "triton 2.51"
WORKBENCH = "workbench"
STRICT_STABILITY = 10  # perf_analyzer's default --stability-percentage
#: looser --stability-percentage values tried in turn when a point does not stabilize, and the
#: mark each puts next to its numbers
LOOSE_MARKS = {25: "†", 50: "‡"}


@dataclass
class Measurement:
    """One perf_analyzer run: throughput, p99 latency and server-side batch size, or an error."""

    concurrency: int
    infer_per_s: float | None = None
    p99_ms: float | None = None
    stability_pct: int = STRICT_STABILITY
    #: inference_count / execution_count over the run (statistics endpoint); None if unread
    avg_batch_size: float | None = None
    #: server-side compute_infer per request over the run, in ms (the batch's time when batched)
    avg_compute_ms: float | None = None
    error: str | None = None

    @property
    def mark(self) -> str:
        """`` †`` or `` ‡`` when the point needed a looser stability criterion."""
        mark = LOOSE_MARKS.get(self.stability_pct)
        return f" {mark}" if mark else ""


@dataclass
class Series:
    """Every concurrency measured for one model on one server."""

    server: str
    model: str
    startup_s: float = 0.0
    measurements: list[Measurement] = field(default_factory=list)
    error: str | None = None

    def at(self, concurrency: int) -> Measurement:
        """The point at ``concurrency``; an empty one when it was not measured."""
        found = (m for m in self.measurements if m.concurrency == concurrency)
        return next(found, Measurement(concurrency))

    @property
    def failed(self) -> bool:
        return self.error is not None or any(m.error for m in self.measurements)


@dataclass(frozen=True)
class PerfSettings:
    """The perf_analyzer options every point of one run shares."""

    measurement_ms: int = 3000
    #: ``--max-trials`` (perf_analyzer's default, 10, when None)
    max_trials: int | None = None
    #: the looser ``--stability-percentage`` values to retry with, in turn (keys of LOOSE_MARKS)
    retry_stability: tuple[int, ...] = (25,)
    #: more perf_analyzer options for every point (``--shape INPUT0:n``, say)
    extra_args: tuple[str, ...] = ()

    def describe(self, protocol: str = "http") -> str:
        trials = self.max_trials if self.max_trials is not None else 10
        retries = ", then ".join(
            f"{pct}% (marked {LOOSE_MARKS[pct]})" for pct in self.retry_stability
        )
        return (
            f"perf_analyzer (tritonclient {TRITONCLIENT_VERSION}) over "
            f"{'gRPC (`-i grpc`)' if protocol == 'grpc' else 'HTTP'}, "
            f"`--measurement-interval={self.measurement_ms}`, `--max-trials={trials}`, "
            f"stabilized on the average latency at {STRICT_STABILITY}% "
            f"(retried at {retries} when unstable); p99 from its CSV"
        )


# --- perf_analyzer ---------------------------------------------------------------------------


def parse_perf_csv(text: str) -> tuple[float, float]:
    """(inferences/s, p99 ms) from the last row of perf_analyzer's ``-f`` CSV (times in us)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("perf_analyzer wrote an empty CSV")
    row = rows[-1]
    return float(row["Inferences/Second"]), float(row["p99 latency"]) / 1000.0


def measure(
    peers: Peers,
    url: str,
    model: str,
    concurrency: int,
    settings: PerfSettings,
    protocol: str = "http",
    stats_url: str | None = None,
) -> Measurement:
    """perf_analyzer at ``concurrency``; retried with looser stability criteria while unstable.

    ``protocol``: perf_analyzer's ``-i`` (``url`` is then that endpoint's); ``stats_url``: the
    HTTP ``host:port`` the statistics are read from (``url`` when None).
    """
    run = (peers, url, model, concurrency, settings)
    measurement = _measure_counted(*run, STRICT_STABILITY, protocol, stats_url)
    for stability_pct in settings.retry_stability:
        if not (measurement.error and "stable measurement" in measurement.error):
            break
        measurement = _measure_counted(*run, stability_pct, protocol, stats_url)
    return measurement


def _measure_counted(
    peers: Peers,
    url: str,
    model: str,
    concurrency: int,
    settings: PerfSettings,
    stability_pct: int,
    protocol: str = "http",
    stats_url: str | None = None,
) -> Measurement:
    """One perf_analyzer run, with the model's execution counters read around it."""
    before = ModelCounters.read(stats_url or url, model)
    measurement = _measure_once(peers, url, model, concurrency, settings, stability_pct, protocol)
    after = ModelCounters.read(stats_url or url, model)
    # A failed run has no numbers of its own: its counters would describe nothing in the table.
    if measurement.error is None and before is not None and after is not None:
        delta = after.minus(before)
        if delta.executions > 0:
            measurement.avg_batch_size = delta.inferences / delta.executions
        if delta.compute_count > 0:
            measurement.avg_compute_ms = delta.compute_ns / delta.compute_count / 1e6
    return measurement


def _measure_once(
    peers: Peers,
    url: str,
    model: str,
    concurrency: int,
    settings: PerfSettings,
    stability_pct: int,
    protocol: str = "http",
) -> Measurement:
    """Run perf_analyzer once; a failure is recorded, not raised."""
    with tempfile.TemporaryDirectory(prefix="perf-") as folder:
        csv_path = Path(folder) / "perf.csv"
        # Stabilize on the average (perf_analyzer's default): stabilizing on p99 rarely
        # converges on 2 cores. The CSV reports p99 either way.
        extra = ["-f", str(csv_path), f"--stability-percentage={stability_pct}"]
        extra += settings.extra_args
        trials = settings.max_trials if settings.max_trials is not None else 10
        if settings.max_trials is not None:
            extra.append(f"--max-trials={settings.max_trials}")
        rc, output = run_perf_analyzer(
            model,
            url,
            protocol=protocol,
            concurrency=concurrency,
            measurement_ms=settings.measurement_ms,
            extra_args=extra,
            peers=peers,
            timeout_s=30 + (trials + 2) * settings.measurement_ms / 1000,
        )
        if rc != 0 or not csv_path.exists():
            error = f"perf_analyzer exit {rc}: {output[-2000:]}"
            return Measurement(concurrency, stability_pct=stability_pct, error=error)
        infer_per_s, p99_ms = parse_perf_csv(csv_path.read_text())
    return Measurement(concurrency, infer_per_s, p99_ms, stability_pct)


@dataclass(frozen=True)
class ModelCounters:
    """The counters of ``/v2/models/{model}/stats`` that the reports use (all versions)."""

    inferences: int
    executions: int
    compute_ns: int
    compute_count: int

    @classmethod
    def read(cls, url: str, model: str) -> ModelCounters | None:
        """The model's counters now; None when the statistics cannot be read."""
        address = f"http://{url}/v2/models/{model}/stats"
        try:
            with urllib.request.urlopen(address, timeout=5.0) as response:
                stats = json.loads(response.read())["model_stats"]
            compute = [entry["inference_stats"]["compute_infer"] for entry in stats]
            return cls(
                sum(int(entry["inference_count"]) for entry in stats),
                sum(int(entry["execution_count"]) for entry in stats),
                sum(int(phase["ns"]) for phase in compute),
                sum(int(phase["count"]) for phase in compute),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def minus(self, earlier: ModelCounters) -> ModelCounters:
        return ModelCounters(
            self.inferences - earlier.inferences,
            self.executions - earlier.executions,
            self.compute_ns - earlier.compute_ns,
            self.compute_count - earlier.compute_count,
        )


def child_pids(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (the model processes of either server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            continue
        if parent == str(pid):
            found.append(int(entry.name))
    return found


def measure_series(
    peers: Peers,
    series: Series,
    url: str,
    concurrencies: Sequence[int],
    settings: PerfSettings,
    protocol: str = "http",
    stats_url: str | None = None,
) -> None:
    """Measure ``series.model`` at every concurrency, printing each point as it lands."""
    for concurrency in concurrencies:
        measurement = measure(peers, url, series.model, concurrency, settings, protocol, stats_url)
        print(f"  {series.server} {series.model} c={concurrency}: {describe(measurement)}")
        sys.stdout.flush()
        series.measurements.append(measurement)


def describe(measurement: Measurement) -> str:
    """One line for the progress log."""
    if measurement.error is not None:
        return f"FAILED ({measurement.error.strip().splitlines()[-1]})"
    text = f"{measurement.infer_per_s:,.0f} infer/s, p99 {measurement.p99_ms:.2f} ms"
    if measurement.avg_batch_size is not None:
        text += f", avg batch {measurement.avg_batch_size:.2f}"
    if measurement.avg_compute_ms is not None:
        text += f", compute {measurement.avg_compute_ms:.2f} ms"
    if measurement.stability_pct != STRICT_STABILITY:
        text += f" (stability {measurement.stability_pct}%)"
    return text


# --- the workbench server --------------------------------------------------------------------


class WorkbenchServerProcess:
    """``python -m workbench serve`` on loopback in its own session; stopped by pid."""

    def __init__(
        self,
        repository: Path,
        log_path: Path,
        load_models: Sequence[str],
        startup_timeout_s: float = 60.0,
        extra_args: Sequence[str] = (),
        python: str | None = None,
    ) -> None:
        self.repository = repository
        #: the interpreter that runs the server (and so its Python models' stubs)
        self.python = python or sys.executable
        self.extra_args = tuple(extra_args)
        self.log_path = log_path
        self.load_models = tuple(load_models)
        self.startup_timeout_s = startup_timeout_s
        self.http_port = free_port()
        self.grpc_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s = 0.0

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        command = [
            self.python, "-m", "workbench", "serve",
            "--model-repository", str(self.repository),
            "--http-port", str(self.http_port), "--http-address", "127.0.0.1",
            "--grpc-port", str(self.grpc_port), "--grpc-address", "127.0.0.1",
            "--allow-metrics", "false",
            "--model-control-mode", "explicit", "--exit-timeout-secs", "5",
        ]  # fmt: skip
        for name in self.load_models:
            command += ["--load-model", name]
        return command + list(self.extra_args)

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
        failure = wait_ready(self.process, self.http_url, self.startup_timeout_s)
        if failure is not None:
            raise RuntimeError(self._failure(failure))

    def _failure(self, what: str) -> str:
        log = self.log_path.read_text(errors="replace")[-4000:]
        return f"workbench server {what}; log {self.log_path}:\n{log}"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, SIGKILL after ``timeout_s``; then the session's leftovers (instance workers)."""
        process, self.process = self.process, None
        if process is not None:
            stop_session(process, timeout_s)


@contextlib.contextmanager
def workbench_server(
    repository: Path,
    log_path: Path,
    load_models: Sequence[str],
    extra_args: Sequence[str] = (),
    python: str | None = None,
) -> Iterator[WorkbenchServerProcess]:
    """A started :class:`WorkbenchServerProcess` (on ``python``, this interpreter when None),
    stopped on exit whatever happens."""
    server = WorkbenchServerProcess(
        repository, log_path, load_models, extra_args=extra_args, python=python
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


def model_config(url: str, model: str) -> dict[str, object]:
    """``GET /v2/models/{model}/config`` as the server answers it."""
    with urllib.request.urlopen(f"http://{url}/v2/models/{model}/config", timeout=5.0) as answer:
        config: dict[str, object] = json.loads(answer.read())
    return config


# --- report ----------------------------------------------------------------------------------


def cell(value: float | None, digits: int, mark: str = "") -> str:
    """A number for a table cell; ``error`` when it is missing."""
    return "error" if value is None else f"{value:,.{digits}f}{mark}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    """``1.23x``, or ``n/a`` when either side is missing."""
    if numerator is None or not denominator:
        return "n/a"
    return f"{numerator / denominator:.2f}x"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table; each stability mark used in it adds its footnote."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    used = [(pct, mark) for pct, mark in LOOSE_MARKS.items() if mark in "".join(lines)]
    if used:
        lines.append("")
    for pct, mark in used:
        lines.append(f"{mark} unstable at stricter criteria: measured with "
                     f"`--stability-percentage={pct}`")  # fmt: skip
    return "\n".join(lines)


def machine_info() -> dict[str, str]:
    """Date, machine, load, versions and commit: what to record next to the numbers."""
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


def python_version(python: str) -> str:
    """``python``'s path and version (``python -V``), for a report."""
    try:
        found = subprocess.run([python, "-V"], capture_output=True, text=True, timeout=30)
        version = (found.stdout or found.stderr).strip()
    except (OSError, subprocess.SubprocessError) as exc:
        version = f"unknown ({exc})"
    return f"{python} ({version})"


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


def errors_section(series: Sequence[Series]) -> str:
    """Every recorded failure verbatim (tail of perf_analyzer or server output)."""
    lines: list[str] = []
    for one in series:
        if one.error:
            lines.append(_fenced(f"{one.server} {one.model}", one.error))
        for m in one.measurements:
            if m.error:
                lines.append(_fenced(f"{one.server} {one.model} c={m.concurrency}", m.error))
    return "\n\n".join(lines)


def _fenced(title: str, text: str) -> str:
    return f"### {title}\n\n```\n{text.strip()}\n```"


def write_report(path: Path, title: str, body: str, info: dict[str, str], errors: str) -> None:
    """``# title``, the body (tables and their notes), the machine, then any errors."""
    machine = "\n".join(f"- {key}: {value}" for key, value in info.items())
    text = f"# {title}\n\n{body}\n\n## Machine\n\n{machine}\n"
    if errors:
        text += f"\n## Errors\n\n{errors}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def results_path(suffix: str) -> Path:
    """``benchmarks/results/<date>_<suffix>.md``, or ``..._<suffix>_2.md`` (3, ...) when a run
    of the same day already wrote that one: a rerun never overwrites a result."""
    stem = f"{datetime.date.today()}_{suffix}"
    path, number = RESULTS_DIR / f"{stem}.md", 1
    while path.exists() or path.with_suffix(".json").exists():
        number += 1
        path = RESULTS_DIR / f"{stem}_{number}.md"
    return path
