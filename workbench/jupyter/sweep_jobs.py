"""The sweeps started through the REST API: one at a time, on the extension's server.

A sweep is ``workbench.bench.sweep(..., wait=False)``, the code behind ``bench.sweep``: it runs
on a thread with its own event loop (``bench.sweep.start_sweep``) and sends its load from a
worker process, so Jupyter's loop only starts it, reads its rows and asks it to stop. That
thread is the one worker: a second sweep while one runs is refused (409) rather than queued,
because two sweeps on one server would measure each other. Finished sweeps stay listed with
their rows (the last ``KEPT``) until Jupyter stops, which stops a running one.

On a local engine the sweep reconfigures a scratch copy of the model in the served repository;
on a remote one (``c.Workbench.engine`` a URL) it loads each point as an override of the
model itself and loads back what served before (``workbench.bench.reconfigure``).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from workbench import threads
from workbench.bench import CONFIG_AXES, Endpoints, SweepResult, sweep
from workbench.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from workbench.jupyter.host import ServerHost
from workbench.jupyter.model_configs import ModelConfigs
from workbench.threads import Work

#: what a start request may hold besides ``model``: ``bench.sweep``'s keyword arguments
OPTIONS = ("concurrency", "duration_s", "warmup_s", "protocol", "inputs", "shapes")
PARAMETERS = ("model", *CONFIG_AXES, *OPTIONS)
#: finished sweeps kept in the list
KEPT = 20
#: how long stopping Jupyter waits for a running sweep to end its measurement
STOP_WAIT_S = 30.0


class SweepRunningError(AlreadyExistsError):
    """A sweep is running, and they run one at a time."""

    status = 409


@dataclass
class SweepJob:
    """One sweep started through the API: its request, its result as it fills, its times."""

    id: str
    request: dict[str, Any]
    result: SweepResult
    started: str = field(default_factory=lambda: _now())
    finished: str = ""
    _clock: float = field(default_factory=time.monotonic)
    _took_s: float | None = None

    def __post_init__(self) -> None:
        self.result.on_finish(self._finished)

    def _finished(self, _result: SweepResult) -> None:
        self.finished, self._took_s = _now(), time.monotonic() - self._clock

    @property
    def state(self) -> str:
        """``running``, ``stopping``, then ``done``, ``stopped`` or ``failed``."""
        stopping = self.result.stop_event.is_set()
        if self.result.running:
            return "stopping" if stopping else "running"
        if self.result.error is not None:
            return "failed"
        return "stopped" if stopping or self.result.partial else "done"

    def summary(self) -> dict[str, Any]:
        """What the list shows: state and progress."""
        took = self._took_s if self._took_s is not None else time.monotonic() - self._clock
        return {
            "id": self.id,
            "model": self.result.model,
            "state": self.state,
            "done": len(self.result.rows),
            "total": self.result.planned,
            "elapsed_s": round(took, 3),
            "error": str(self.result.error) if self.result.error is not None else "",
            "started": self.started,
            "finished": self.finished,
            "request": self.request,
        }

    def detail(self) -> dict[str, Any]:
        """The summary with the rows measured so far, as ``result.df`` would hold them."""
        columns = self.result.columns
        rows = [[_plain(row.get(c)) for c in columns] for row in list(self.result.rows)]
        return {**self.summary(), "columns": columns, "rows": rows}


class SweepJobs:
    """The API's sweeps, on the server ``host`` runs, of models in its repository."""

    def __init__(self, host: ServerHost, configs: ModelConfigs) -> None:
        self.host = host
        self.configs = configs
        self.jobs: dict[str, SweepJob] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def start(self, body: Mapping[str, Any]) -> SweepJob:
        """Start a sweep of ``body["model"]`` with ``bench.sweep``'s parameters."""
        async with self._lock:
            running = [job for job in self.jobs.values() if job.result.running]
            if running:
                raise SweepRunningError(
                    f"a sweep of '{running[0].result.model}' is running (id {running[0].id}); "
                    f"sweeps run one at a time: stop it (POST .../sweeps/{running[0].id}/stop) "
                    "or wait for it to end"
                )
            model, settings, options = _parse(body)
            self.host.require_client()
            model_dir = self.configs.model_dir(model)
            endpoints = self._endpoints()
            start = functools.partial(sweep, settings=settings, wait=False, **options)
            result = await threads.run(Work.SWEEP, start, model, model_dir, endpoints)
            job = SweepJob(str(next(self._ids)), dict(body), result)
            self.jobs[job.id] = job
            self._forget_old()
            return job

    def _endpoints(self) -> Endpoints:
        endpoints = self.host.endpoints
        assert endpoints is not None, "require_client() checked it"
        # a remote server cannot read a scratch copy written here: points load as overrides
        repository = None if self.host.remote else self.host.repository
        return Endpoints(endpoints.http_address, repository, endpoints.grpc_url)

    def _forget_old(self) -> None:
        finished = [key for key, job in self.jobs.items() if not job.result.running]
        for key in finished[: max(0, len(finished) - KEPT)]:
            del self.jobs[key]

    def get(self, sweep_id: str) -> SweepJob:
        try:
            return self.jobs[sweep_id]
        except KeyError:
            raise NotFoundError(f"no sweep '{sweep_id}' (GET .../sweeps lists them)") from None

    def stop(self, sweep_id: str) -> SweepJob:
        """Ask the sweep to stop after its current measurement; its rows stay readable."""
        job = self.get(sweep_id)
        job.result.stop()
        return job

    async def close(self) -> None:
        """Stop a running sweep and give it ``STOP_WAIT_S`` to end (Jupyter is stopping)."""
        for job in list(self.jobs.values()):
            if job.result.running:
                job.result.stop()
                await threads.run(Work.SWEEP, _wait_quietly, job.result)


def _parse(body: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``model``, the config axes and the sweep's options; ``InvalidArgumentError`` (400) for
    what ``bench.sweep`` would not take. The grid itself is checked by ``sweep()``."""
    unknown = sorted(set(body) - set(PARAMETERS))
    if unknown:
        raise InvalidArgumentError(
            f"unknown sweep parameter(s) {', '.join(unknown)}; use {', '.join(PARAMETERS)}"
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidArgumentError('the body needs "model": the name of the model to sweep')
    for key in (*CONFIG_AXES, "concurrency"):
        value = body.get(key)
        if value is not None and not isinstance(value, int | list):
            raise InvalidArgumentError(
                f"{key} must be an integer or a list of integers, got {value!r}"
            )
    for key in ("duration_s", "warmup_s"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise InvalidArgumentError(f"{key} must be a number of seconds, got {value!r}")
    for key in ("inputs", "shapes"):
        if body.get(key) is not None and not isinstance(body[key], dict):
            raise InvalidArgumentError(f"{key} must map input names to values, got {body[key]!r}")
    settings = {axis: body.get(axis) for axis in CONFIG_AXES}
    options = {key: body[key] for key in OPTIONS if body.get(key) is not None}
    return model, settings, options


def _wait_quietly(result: SweepResult) -> None:
    try:
        result.wait(STOP_WAIT_S)
    except Exception:  # Jupyter is stopping: how the sweep ended is no one's concern now
        return


def _plain(value: Any) -> Any:
    """A JSON value: numpy scalars as Python ones, NaN and infinities as null."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


__all__ = ["PARAMETERS", "SweepJob", "SweepJobs", "SweepRunningError"]
