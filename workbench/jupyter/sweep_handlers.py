"""The sweep routes under ``<base_url>/workbench/api/sweeps`` (the work: ``sweep_jobs.py``).

Authenticated, authorized and answered like every route of ``handlers.py`` (whose route table
lists these too). A start's body holds ``model`` and ``bench.sweep``'s parameters, e.g.
``{"model": "add", "max_batch_size": [1, 8], "concurrency": [1, 4], "duration_s": 2}``.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from workbench.jupyter.handlers import WorkbenchHandler
from workbench.jupyter.sweep_jobs import SweepJobs

_SWEEP = r"(?P<sweep_id>[0-9]+)"


class SweepsBase(WorkbenchHandler):
    @property
    def sweeps(self) -> SweepJobs:
        return self.settings["workbench_sweeps"]


class SweepsHandler(SweepsBase):
    """GET: every sweep with its state and progress; POST: start one (201, or 409 while one
    runs, 400 for a parameter ``bench.sweep`` would refuse)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.respond(self._list())

    async def _list(self) -> dict[str, Any]:
        return {"sweeps": [job.summary() for job in self.sweeps.jobs.values()]}

    @web.authenticated
    @authorized
    async def post(self) -> None:
        await self.respond(self._start())

    async def _start(self) -> dict[str, Any]:
        job = await self.sweeps.start(self.json_body())
        self.set_status(201)
        return job.summary()


class SweepHandler(SweepsBase):
    """GET: one sweep with its rows so far (``columns`` and ``rows``, NaN as null)."""

    @web.authenticated
    @authorized
    async def get(self, sweep_id: str) -> None:
        await self.respond(self._detail(sweep_id))

    async def _detail(self, sweep_id: str) -> dict[str, Any]:
        return self.sweeps.get(sweep_id).detail()


class SweepStopHandler(SweepsBase):
    """POST: stop after the current measurement; the rows measured stay readable."""

    @web.authenticated
    @authorized
    async def post(self, sweep_id: str) -> None:
        await self.respond(self._stop(sweep_id))

    async def _stop(self, sweep_id: str) -> dict[str, Any]:
        return self.sweeps.stop(sweep_id).summary()


def sweep_routes() -> list[tuple[str, type[WorkbenchHandler]]]:
    api = "workbench/api"
    return [
        (f"{api}/sweeps", SweepsHandler),
        (f"{api}/sweeps/{_SWEEP}", SweepHandler),
        (f"{api}/sweeps/{_SWEEP}/stop", SweepStopHandler),
    ]


__all__ = ["SweepHandler", "SweepStopHandler", "SweepsHandler", "sweep_routes"]
