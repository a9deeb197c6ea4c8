"""``SweepResult``: the rows of a sweep, their table and figure, and the best configuration.

Reading a result (``df``, ``figure``, ``best``, ``apply_best``, ``save``) waits for its sweep to
finish, so a notebook run with "Run All" reads what a notebook run cell by cell reads; the live
view keeps drawing meanwhile (it is fed row by row, not through these). Interrupting that wait
(Jupyter's stop button: ``KeyboardInterrupt``) stops the sweep after the current measurement
and raises ``SweepInterrupted``; the rows measured stay readable, and every read of a result
that has fewer rows than planned says so (``PartialSweepWarning``, ``df.attrs["partial"]``).
``save`` writes JSON (the model's base configuration as pbtxt, every row), which
``SweepResult.load`` reads.
"""

from __future__ import annotations

import difflib
import json
import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import StrPath
from workbench.bench.figure import latency_figure
from workbench.bench.host_cpu import SATURATED
from workbench.bench.plan import CONFIG_AXES, apply_settings
from workbench.bench.selection import candidates, select_best
from workbench.bench.trace_report import TraceReport
from workbench.config import parse_pbtxt, to_pbtxt
from workbench.errors import InvalidArgumentError, MissingDependencyError, UnavailableError

#: the measured columns of ``df`` after the configuration and concurrency columns
METRIC_COLUMNS = (
    "throughput",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "avg_ms",
    "requests",
    "errors",
    "queue_us",
    "compute_input_us",
    "compute_infer_us",
    "compute_output_us",
    "avg_batch",
    "host_cpu",
    "error",
)
FORMAT = "triton-workbench-sweep/1"


class SupportsEdit(Protocol):
    """What ``apply_best`` needs: a ``Workbench`` (its ``edit`` returns a ``ConfigEditor``)."""

    def edit(self, name: str) -> Any: ...


@dataclass(frozen=True)
class BestConfig:
    """The chosen point: its settings, measurements, full config and diff against the base."""

    model: str
    settings: Mapping[str, int]
    concurrency: int
    metrics: Mapping[str, Any]
    config: ModelConfig
    diff: str

    def __str__(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.settings.items()) or "as is"
        head = (
            f"best for '{self.model}': {settings} at concurrency {self.concurrency}: "
            f"{self.metrics['throughput']:.1f} infer/s, p99 {self.metrics['p99_ms']:.2f} ms"
        )
        return f"{head}\n{self.diff}" if self.diff else head


class PartialSweepWarning(UserWarning):
    """The result read has fewer measurements than its sweep planned (stopped or failed)."""


class SaturatedHostWarning(UserWarning):
    """``best()`` chose an instance count among points where this machine's CPUs were
    contended (``host_cpu`` at ``host_cpu.SATURATED`` or more), where the choice can differ
    from real Triton's (``host_cpu.py``)."""


def _saturated(rows: Sequence[Mapping[str, Any]], count: Any) -> SaturatedHostWarning | None:
    """The warning for an instance count chosen among ``rows`` where some were measured with
    this machine's CPUs contended; None when there was no choice of count or no such row."""
    if len({row.get("instance_count") for row in rows}) < 2:
        return None
    busy = [row for row in rows if _share(row.get("host_cpu")) >= SATURATED]
    if not busy:
        return None
    where = "; ".join(f"{row.get('config')} at c={row.get('concurrency')}" for row in busy[:4])
    more = f" and {len(busy) - 4} more" if len(busy) > 4 else ""
    return SaturatedHostWarning(
        f"this machine's CPUs were {SATURATED:.0%} busy or more at {len(busy)} of the "
        f"{len(rows)} points chosen among (host_cpu: {where}{more}): there the server, the "
        "model's instances and the load share the cores, so more instances gain only what the "
        "rest leaves them (on the embedded server, whose one event loop hands every instance "
        "its work where Triton has a thread per instance, less than on real Triton). Confirm "
        f"instance_count={count} on the machine you will serve from, or on real Triton "
        '(Workbench.connect, engine="tritonserver").'
    )


def _share(value: Any) -> float:
    """A row's ``host_cpu`` as a number (0 when missing or NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return 0.0
    return float(value)


class SweepInterrupted(KeyboardInterrupt):
    """The wait for a sweep was interrupted; the sweep was stopped and its rows kept."""


#: how long an interrupted wait gives the sweep to end its current measurement
STOP_GRACE_S = 60.0


class SweepResult:
    """Rows of one sweep of ``model`` (one per configuration and concurrency)."""

    def __init__(
        self,
        model: str,
        base_config: ModelConfig,
        axes: Sequence[str],
        rows: Sequence[Mapping[str, Any]] = (),
        *,
        options: Mapping[str, Any] | None = None,
        finished: bool = True,
        bench: SupportsEdit | None = None,
    ) -> None:
        self.model = model
        self.base_config = base_config
        self.axes = [axis for axis in CONFIG_AXES if axis in axes]
        self.rows: list[dict[str, Any]] = [dict(row) for row in rows]
        #: how the sweep ran: protocol, duration_s, concurrency levels, ...
        self.options = dict(options or {})
        #: the ``Workbench`` that ran it, so that ``apply_best()`` needs no argument
        self.bench = bench
        #: why the sweep ended early, when it could not go on (``wait`` raises it)
        self.error: BaseException | None = None
        #: trace entries by configuration (``config`` column), with ``trace_requests=``
        self.traces: dict[str, list[dict[str, Any]]] = {}
        self._finished = threading.Event()
        self._stop = threading.Event()
        self._on_finish: list[Callable[[SweepResult], None]] = []
        if finished:
            self._finished.set()

    # -- progress ----------------------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        return ["config", *self.axes, "concurrency", *METRIC_COLUMNS]

    @property
    def running(self) -> bool:
        return not self._finished.is_set()

    @property
    def planned(self) -> int | None:
        """How many rows the sweep was to measure (``None`` for results made by hand)."""
        planned = self.options.get("measurements")
        return int(planned) if planned is not None else None

    @property
    def partial(self) -> bool:
        """The sweep ended with fewer rows than planned (stopped, or ended by an error)."""
        return not self.running and self.planned is not None and len(self.rows) < self.planned

    def wait(self, timeout_s: float | None = None) -> SweepResult:
        """Block until the sweep is done (``UnavailableError`` after ``timeout_s``); re-raise
        the error that ended it, if one did. An interrupt stops the sweep (see the module)."""
        self._wait_finished(timeout_s)
        if self.error is not None:
            raise self.error
        return self

    def _wait_finished(self, timeout_s: float | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            # short slices: the interrupt of a kernel arrives between them on every platform
            while not self._finished.wait(0.1):
                if deadline is not None and time.monotonic() >= deadline:
                    raise UnavailableError(f"the sweep of '{self.model}' is still running")
        except KeyboardInterrupt:
            self.stop()
            self._finished.wait(STOP_GRACE_S)
            raise SweepInterrupted(
                f"the sweep of '{self.model}' was stopped by the interrupt; "
                f"{self._progress()}: the result holds them (partial)"
            ) from None

    def _progress(self) -> str:
        planned = f" of {self.planned}" if self.planned is not None else ""
        return f"{len(self.rows)}{planned} measurements done"

    def _finished_rows(self, stacklevel: int = 3) -> list[dict[str, Any]]:
        """The rows once the sweep has ended, with a warning when there are fewer than planned.

        ``stacklevel`` points the warning at the user's line: 3 from a public method that
        calls this directly, one more for each private method in between."""
        self._wait_finished()
        if self.partial:
            why = f"ended by an error ({self.error})" if self.error else "stopped"
            warnings.warn(
                PartialSweepWarning(
                    f"partial result: the sweep of '{self.model}' was {why}; {self._progress()}"
                ),
                stacklevel=stacklevel,
            )
        return list(self.rows)

    def finish(self, error: BaseException | None = None) -> None:
        """Mark the sweep done (the runner calls it, also when it fails)."""
        self.error = error
        self._finished.set()
        for callback in list(self._on_finish):
            callback(self)

    def on_finish(self, callback: Callable[[SweepResult], None]) -> None:
        """Call ``callback(result)`` when the sweep ends (at once if it has ended)."""
        self._on_finish.append(callback)
        if not self.running:
            callback(self)

    def stop(self) -> None:
        """Ask a running sweep to stop after the current measurement (it keeps its rows)."""
        self._stop.set()

    @property
    def stop_event(self) -> threading.Event:
        """Set when ``stop()`` was called; the load generator checks it between requests."""
        return self._stop

    # -- views -------------------------------------------------------------------------------------
    @property
    def df(self) -> Any:
        """One row per (configuration, concurrency) as a pandas DataFrame, once the sweep has
        ended; ``df.attrs["partial"]`` is true when it has fewer rows than planned."""
        try:
            import pandas
        except ImportError:
            raise MissingDependencyError("pandas", "notebook") from None
        frame = pandas.DataFrame(self._finished_rows(), columns=self.columns)
        frame.attrs["partial"] = self.partial
        return frame

    @property
    def figure(self) -> Any:
        """Latency-vs-throughput curves, one per configuration (a plotly ``Figure``), once the
        sweep has ended."""
        return latency_figure(self._finished_rows())

    def trace(self, point: int | str = 0) -> TraceReport:
        """The requests traced at one configuration (a sweep run with ``trace_requests=N``):
        a ``TraceReport`` as ``Workbench.trace`` returns, showing where time goes there.
        ``point``: its index in sweep order, or its ``config`` label."""
        self.wait()
        if not self.traces:
            raise InvalidArgumentError(
                "this sweep traced no requests: sweep(..., trace_requests=N)"
            )
        labels = list(self.traces)
        if isinstance(point, int) and not 0 <= point < len(labels):
            raise InvalidArgumentError(f"point must be 0 to {len(labels) - 1}, got {point}")
        label = labels[point] if isinstance(point, int) else point
        if label not in self.traces:
            raise InvalidArgumentError(f"no traces for '{label}'; traced: {labels}")
        requests = self.options.get("trace_requests", "")
        return TraceReport(
            self.traces[label], title=f"{self.model} ({label}): {requests} traced requests"
        )

    # -- the best configuration --------------------------------------------------------------------
    def best(
        self,
        p99_ms: float | None = None,
        min_throughput: float | None = None,
        objective: str = "perf_throughput",
    ) -> BestConfig:
        """The best point (highest throughput by default) meeting the constraints. Warns
        (``SaturatedHostWarning``) when it chose an instance count among points where this
        machine's CPUs were contended."""
        best, warning = self._choose(p99_ms, min_throughput, objective)
        if warning is not None:
            warnings.warn(warning, stacklevel=2)
        return best

    def _choose(
        self,
        p99_ms: float | None = None,
        min_throughput: float | None = None,
        objective: str = "perf_throughput",
    ) -> tuple[BestConfig, SaturatedHostWarning | None]:
        self.wait()
        rows = self._finished_rows(stacklevel=4)  # the user, best() or apply_best(), _choose
        row = select_best(rows, objective=objective, p99_ms=p99_ms, min_throughput=min_throughput)
        settings = {axis: int(row[axis]) for axis in self.axes if row.get(axis) is not None}
        config = apply_settings(self.base_config, settings)
        diff = "".join(
            difflib.unified_diff(
                to_pbtxt(self.base_config).splitlines(keepends=True),
                to_pbtxt(config).splitlines(keepends=True),
                fromfile=f"{self.model}/config.pbtxt",
                tofile=f"{self.model}/config.pbtxt (best)",
            )
        )
        metrics = {key: row.get(key) for key in METRIC_COLUMNS}
        best = BestConfig(self.model, settings, int(row["concurrency"]), metrics, config, diff)
        chosen_among = candidates(rows, p99_ms=p99_ms, min_throughput=min_throughput)
        return best, _saturated(chosen_among, row.get("instance_count"))

    def apply_best(self, bench: SupportsEdit | None = None, **constraints: Any) -> BestConfig:
        """Write the best configuration to the model's ``config.pbtxt`` through the config
        editor's safe path (validated, atomic, backup kept, reloaded; restored if the reload
        fails). The settings go onto the file as it is now, so later hand edits are kept."""
        best, warning = self._choose(**constraints)
        if warning is not None:
            warnings.warn(warning, stacklevel=2)
        target = bench or self.bench
        if target is None:
            raise InvalidArgumentError(
                "apply_best() needs the Workbench serving the model: result.apply_best(bench)"
            )
        editor = target.edit(self.model)
        editor.config = apply_settings(editor.config, best.settings)
        editor.apply()
        return best

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path: StrPath) -> Path:
        """Write the result as JSON (after the sweep is done); returns the path."""
        self.wait()
        rows = self._finished_rows()
        data = {
            "format": FORMAT,
            "model": self.model,
            "axes": self.axes,
            "base_config": to_pbtxt(self.base_config),
            "options": self.options,
            "rows": rows,
        }
        target = Path(path)
        target.write_text(json.dumps(data, indent=1), encoding="utf-8")
        return target

    @classmethod
    def load(cls, path: StrPath) -> SweepResult:
        """Read a result written by ``save``."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InvalidArgumentError(f"{path} is not a saved sweep result ({FORMAT})")
        config = parse_pbtxt(data["base_config"], source=f"{path} (base_config)")
        return cls(data["model"], config, data["axes"], data["rows"], options=data["options"])

    def __repr__(self) -> str:
        state = "running" if self.running else "partial" if self.partial else "done"
        configs = len({row.get("config") for row in self.rows})
        return (
            f"SweepResult('{self.model}', {state}, {len(self.rows)} rows, {configs} configurations)"
        )


__all__ = [
    "FORMAT",
    "METRIC_COLUMNS",
    "BestConfig",
    "PartialSweepWarning",
    "SaturatedHostWarning",
    "SupportsEdit",
    "SweepInterrupted",
    "SweepResult",
]
