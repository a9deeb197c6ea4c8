"""Run a sweep: for each configuration point, reconfigure a scratch copy, reload, warm up, and
measure each concurrency level with the closed-loop load generator.

Everything goes over Triton's public API (HTTP for control and statistics, HTTP or gRPC for
inference), so a sweep measures a real tritonserver the same way; on a server whose files are
out of reach, each point is loaded as a config override instead (``reconfigure.py``).
The sweep is one coroutine; ``start_sweep`` runs it on its own thread and loop, so a notebook
kernel's loop is never blocked, and listeners hear of every measured row as it lands. The
load itself runs in a worker process (``load_process``): next to an embedded server it would
share the server's GIL and measure the client instead.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench import threads
from workbench.bench.load_generator import PROTOCOLS, LoadResult, error_text
from workbench.bench.load_process import LoadPlan, LoadProcess, LoadProcessError
from workbench.bench.plan import SweepPoint, apply_settings, plan_concurrency, plan_points
from workbench.bench.reconfigure import Reconfiguration, reconfiguration
from workbench.bench.result import SweepResult
from workbench.bench.senders import InferCall
from workbench.bench.server_stats import PHASES, StatsSnapshot
from workbench.bench.synthetic_inputs import synthesize_inputs
from workbench.bench.trace_session import record_trace
from workbench.config import ModelConfig, validate
from workbench.errors import InvalidArgumentError, WorkbenchError


@dataclass(frozen=True)
class SweepSpec:
    """What to measure and how: one object from ``Workbench.sweep`` (or ``sweep()``) to the
    runner. Build it with ``plan``, which checks the values."""

    model: str
    model_dir: Path
    points: Sequence[SweepPoint]
    concurrency: Sequence[int]
    duration_s: float = 3.0
    warmup_s: float = 0.5
    protocol: str = "http"
    inputs: Mapping[str, Any] | None = None
    shapes: Mapping[str, Sequence[int]] | None = None
    #: the config settings swept (those given values), in the order given
    axes: Sequence[str] = ()
    #: requests traced at each point (``SweepResult.trace``), 0: none
    trace_requests: int = 0

    @classmethod
    def plan(
        cls,
        model: str,
        model_dir: Path,
        *,
        settings: Mapping[str, Any],
        concurrency: int | Sequence[int] = (1, 4, 16),
        duration_s: float = 3.0,
        warmup_s: float | None = None,
        protocol: str = "http",
        inputs: Mapping[str, Any] | None = None,
        shapes: Mapping[str, Sequence[int]] | None = None,
        trace_requests: int = 0,
    ) -> SweepSpec:
        """Every combination of ``settings`` (see ``plan_points``) at every ``concurrency``
        level, ``duration_s`` each after ``warmup_s`` per config (default: half the duration,
        at most 1 s); ``trace_requests`` traced requests per config after its warm-up."""
        if trace_requests < 0:
            raise InvalidArgumentError(f"trace_requests must be 0 or more, got {trace_requests}")
        if protocol not in PROTOCOLS:
            raise InvalidArgumentError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        if duration_s <= 0:
            raise InvalidArgumentError(f"duration_s must be positive, got {duration_s}")
        warmup = min(1.0, duration_s / 2) if warmup_s is None else max(0.0, warmup_s)
        return cls(
            model,
            Path(model_dir),
            plan_points(settings),
            plan_concurrency(concurrency),
            duration_s,
            warmup,
            protocol,
            inputs,
            shapes,
            tuple(name for name, values in settings.items() if values is not None),
            trace_requests,
        )

    @property
    def options(self) -> dict[str, Any]:
        """How the sweep runs, as its result records it."""
        return {
            "protocol": self.protocol,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "concurrency": list(self.concurrency),
            "measurements": self.measurements,  # what a complete result holds
            "trace_requests": self.trace_requests,
        }

    @property
    def measurements(self) -> int:
        return len(self.points) * len(self.concurrency)

    @property
    def reconfigures(self) -> bool:
        """Whether any point changes the config (else the model is measured as it serves)."""
        return any(point.settings for point in self.points)


@dataclass(frozen=True)
class Endpoints:
    """Where the server is: ``host:port`` for HTTP and gRPC, and its repository folder.

    ``repository`` None: the server's files are out of reach (a remote server), so each point
    is loaded as a config override of the model itself (``workbench.bench.reconfigure``).
    """

    http: str
    repository: Path | None
    grpc: str | None = None


@dataclass(frozen=True)
class Progress:
    """Reported after every measured row."""

    done: int
    total: int
    elapsed_s: float
    row: Mapping[str, Any]

    @property
    def eta_s(self) -> float:
        return self.elapsed_s / self.done * (self.total - self.done) if self.done else float("nan")


Listener = Callable[[Progress], None]


@dataclass
class SweepRunner:
    """One sweep over ``endpoints``, filling ``result`` row by row."""

    spec: SweepSpec
    endpoints: Endpoints
    result: SweepResult
    listeners: list[Listener] = field(default_factory=list)
    #: the worker process that sends the load (ended when the sweep ends)
    load: LoadProcess = field(default_factory=LoadProcess)
    _started: float = 0.0

    async def run(self) -> SweepResult:
        import tritonclient.http.aio as aio

        self._started = time.perf_counter()
        control = aio.InferenceServerClient(url=self.endpoints.http)
        spec, changes = self.spec, None
        if spec.reconfigures:
            changes = reconfiguration(spec.model, spec.model_dir, self.endpoints.repository)
        try:
            if changes is not None:
                await changes.prepare(control)
            for point in spec.points:
                if self.result.stop_event.is_set():
                    break
                await self._measure_point(control, point, changes)
        finally:
            self.load.close()
            if changes is not None:
                await _quietly(changes.restore(control))
            await control.close()
        return self.result

    async def _measure_point(
        self, control: Any, point: SweepPoint, changes: Reconfiguration | None
    ) -> None:
        stop = self.result.stop_event
        target = changes.target if changes is not None else self.spec.model
        try:
            if changes is not None:
                await self._reconfigure(control, point, changes)
            plan = await self._plan(control, target)
            await self.load.run(plan, max(self.spec.concurrency), self.spec.warmup_s, stop)
            if self.spec.trace_requests:
                self._trace(point, target)
        except InvalidArgumentError:
            raise  # a usage error (inputs cannot be made) is the same for every point
        except Exception as exc:  # the point fails, the sweep goes on
            for concurrency in self.spec.concurrency:
                self._record(_failed_row(point, concurrency, error_text(exc)))
            return
        for concurrency in self.spec.concurrency:
            if stop.is_set():
                break
            before = await _snapshot(control, target)
            try:
                load = await self.load.run(plan, concurrency, self.spec.duration_s, stop)
            except LoadProcessError as exc:  # this level fails; a fresh worker takes the next
                self._record(_failed_row(point, concurrency, str(exc)))
                continue
            after = await _snapshot(control, target)
            # the machine's CPU is the server's only when the server runs here
            host_cpu = load.host_cpu if self.endpoints.repository is not None else math.nan
            self._record(_measured_row(point, load, before, after, host_cpu))

    async def _reconfigure(self, control: Any, point: SweepPoint, changes: Reconfiguration) -> None:
        config = apply_settings(self.result.base_config, point.as_dict())
        config.name = changes.target
        problems = validate(config, model_name=changes.target, model_path=changes.model_path)
        if problems:
            raise WorkbenchError("invalid configuration: " + "; ".join(map(str, problems)))
        await changes.load(control, config)

    async def _plan(self, control: Any, target: str) -> LoadPlan:
        metadata = await control.get_model_metadata(target)
        config = await control.get_model_config(target)
        arrays = synthesize_inputs(
            metadata,
            max_batch_size=int(config.get("max_batch_size", 0)),
            inputs=self.spec.inputs,
            shapes=self.spec.shapes,
        )
        url = self.endpoints.http
        if self.spec.protocol == "grpc":
            if not self.endpoints.grpc:
                raise InvalidArgumentError("protocol='grpc' but the server has no gRPC endpoint")
            url = self.endpoints.grpc
        datatypes = {spec["name"]: spec["datatype"] for spec in metadata["inputs"]}
        outputs = [spec["name"] for spec in metadata["outputs"]]
        return LoadPlan(self.spec.protocol, url, InferCall(target, arrays, datatypes, outputs))

    def _trace(self, point: SweepPoint, target: str) -> None:
        """Trace requests at this point through the trace extension, one at a time, before
        its measured levels (so they are not in its rows). The call blocks this runner's
        loop, which has nothing else to do meanwhile (the load runs in its own process)."""
        recording = record_trace(
            self.endpoints.http,
            target,
            self.spec.trace_requests,
            inputs=self.spec.inputs,
            shapes=self.spec.shapes,
        )
        self.result.traces[point.label] = recording.entries

    def _record(self, row: dict[str, Any]) -> None:
        self.result.rows.append(row)
        progress = Progress(
            len(self.result.rows),
            self.spec.measurements,
            time.perf_counter() - self._started,
            row,
        )
        for listener in list(self.listeners):
            listener(progress)


async def _quietly(call: Any) -> None:
    try:
        await call
    except Exception:  # cleaning up after a sweep must not hide its result
        return


async def _snapshot(control: Any, model: str) -> StatsSnapshot:
    return StatsSnapshot.from_response(await control.get_inference_statistics(model), model)


def _point_columns(point: SweepPoint, concurrency: int) -> dict[str, Any]:
    return {"config": point.label, **point.as_dict(), "concurrency": concurrency}


def _failed_row(point: SweepPoint, concurrency: int, error: str) -> dict[str, Any]:
    nan = float("nan")
    row = _point_columns(point, concurrency)
    row.update({"throughput": 0.0, "requests": 0, "errors": 0, "error": error})
    row.update({key: nan for key in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "avg_ms")})
    row.update({f"{phase}_us": nan for phase in PHASES})
    row["avg_batch"] = row["host_cpu"] = nan
    return row


def _measured_row(
    point: SweepPoint,
    load: LoadResult,
    before: StatsSnapshot,
    after: StatsSnapshot,
    host_cpu: float,
) -> dict[str, Any]:
    row = _point_columns(point, load.concurrency)
    row["throughput"] = load.throughput
    row.update(load.percentiles_ms())
    row["requests"] = len(load.latencies_s)
    row["errors"] = load.errors
    row.update(after.per_request_us(before))
    row["avg_batch"] = after.avg_batch(before)
    row["host_cpu"] = host_cpu
    row["error"] = load.first_error
    return row


def start_sweep(runner: SweepRunner) -> threading.Thread:
    """Run the sweep on a thread of its own (with its own event loop); the result is
    marked finished when it ends, with the error if one ended it."""

    def main() -> None:
        try:
            asyncio.run(runner.run())
        except BaseException as exc:  # handed to whoever waits on the result
            runner.result.finish(exc)
        else:
            runner.result.finish()

    return threads.start(f"workbench-sweep-{runner.spec.model}", main)


def base_config(model_dir: Path) -> ModelConfig:
    """The model's configuration as on disk: what the sweep varies and what diffs compare to."""
    from workbench.config import read_config

    return read_config(model_dir / "config.pbtxt")


__all__ = ["Endpoints", "Progress", "SweepRunner", "SweepSpec", "base_config", "start_sweep"]
