"""``SweepResult``: the rows of a sweep, their table and figure, and the best configuration.

A result can be read while its sweep still runs (``df`` and ``figure`` hold the points done so
far); ``best``, ``apply_best`` and ``save`` wait for the sweep to finish first. ``save`` writes
JSON (the model's base configuration as pbtxt, every row), which ``SweepResult.load`` reads.
"""

from __future__ import annotations

import difflib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import StrPath
from workbench.bench.figure import latency_figure
from workbench.bench.plan import CONFIG_AXES, apply_settings
from workbench.bench.selection import select_best
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
    ) -> None:
        self.model = model
        self.base_config = base_config
        self.axes = [axis for axis in CONFIG_AXES if axis in axes]
        self.rows: list[dict[str, Any]] = [dict(row) for row in rows]
        #: how the sweep ran: protocol, duration_s, concurrency levels, ...
        self.options = dict(options or {})
        #: set by ``Workbench.sweep`` so that ``apply_best()`` needs no argument
        self.bench: SupportsEdit | None = None
        #: why the sweep ended early, when it could not go on (``wait`` raises it)
        self.error: BaseException | None = None
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

    def wait(self, timeout_s: float | None = None) -> SweepResult:
        """Block until the sweep is done (``UnavailableError`` after ``timeout_s``); re-raise
        the error that ended it, if one did."""
        if not self._finished.wait(timeout_s):
            raise UnavailableError(f"the sweep of '{self.model}' is still running")
        if self.error is not None:
            raise self.error
        return self

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
        """One row per (configuration, concurrency) as a pandas DataFrame."""
        try:
            import pandas
        except ImportError:
            raise MissingDependencyError("pandas", "notebook") from None
        return pandas.DataFrame(list(self.rows), columns=self.columns)

    @property
    def figure(self) -> Any:
        """Latency-vs-throughput curves, one per configuration (a plotly ``Figure``)."""
        return latency_figure(self.rows)

    # -- the best configuration --------------------------------------------------------------------
    def best(
        self,
        p99_ms: float | None = None,
        min_throughput: float | None = None,
        objective: str = "perf_throughput",
    ) -> BestConfig:
        """The best point (highest throughput by default) meeting the constraints."""
        self.wait()
        row = select_best(
            self.rows, objective=objective, p99_ms=p99_ms, min_throughput=min_throughput
        )
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
        return BestConfig(self.model, settings, int(row["concurrency"]), metrics, config, diff)

    def apply_best(self, bench: SupportsEdit | None = None, **constraints: Any) -> BestConfig:
        """Write the best configuration to the model's ``config.pbtxt`` through the config
        editor's safe path (validated, atomic, backup kept, reloaded; restored if the reload
        fails). The settings go onto the file as it is now, so later hand edits are kept."""
        best = self.best(**constraints)
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
        data = {
            "format": FORMAT,
            "model": self.model,
            "axes": self.axes,
            "base_config": to_pbtxt(self.base_config),
            "options": self.options,
            "rows": self.rows,
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
        state = "running" if self.running else "done"
        configs = len({row.get("config") for row in self.rows})
        return (
            f"SweepResult('{self.model}', {state}, {len(self.rows)} rows, {configs} configurations)"
        )


__all__ = ["FORMAT", "METRIC_COLUMNS", "BestConfig", "SupportsEdit", "SweepResult"]
