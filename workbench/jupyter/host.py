"""``ServerHost``: the one model server of a Jupyter server, shared by all its notebooks.

It starts the configured engine (``engines.py``), watches the process (a server that dies is
``failed`` with the last lines it wrote, and can be started again), keeps the discovery file
for kernels (``discovery.py``) while the server runs, and samples statistics every
``stats_interval`` seconds (``stats.py``). Kernels come and go; this lives as long as the
Jupyter server, so a kernel restart never touches the models that serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench._version import __version__
from workbench.errors import AlreadyExistsError, NotFoundError, UnavailableError, WorkbenchError
from workbench.jupyter.engines import EmbeddedEngine, Endpoints, Engine, Ports, TritonEngine
from workbench.jupyter.settings import Workbench
from workbench.jupyter.stats import StatsSampler
from workbench.jupyter.triton_client import TritonClient, fetch_text
from workbench.notebook import discovery

#: what the embedded engine always gets: every model loaded, load/unload by API, p99 summaries
EMBEDDED_OPTIONS: dict[str, Any] = {
    "model_control_mode": "explicit",
    "load_model": ["*"],
    "metrics_config": ["summary_latencies=true"],
}


class ServerHost:
    """Start, stop and describe the model server; ``state`` is one of ``stopped``,
    ``starting``, ``running``, ``stopping``, ``failed`` (``reason`` says why)."""

    def __init__(
        self,
        settings: Workbench,
        root_dir: Path,
        jupyter_url: str,
        log: logging.Logger,
        discovery_file: Path,
    ) -> None:
        self.settings = settings
        self.root_dir = root_dir
        self.jupyter_url = jupyter_url
        self.log = log
        self.discovery_file = discovery_file
        self.state = "stopped"
        self.reason = ""
        self.repository = settings.repository_path(root_dir)
        self.endpoints: Endpoints | None = None
        self.client: TritonClient | None = None
        self.server_version = ""
        self.started_at = ""
        self.sampler = StatsSampler(self._statistics, self._metrics, settings.stats_samples)
        self._engine: Engine | None = None
        #: the last lines the current (or last) server wrote
        self._tail: Iterable[str] = ()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()

    # -- life cycle ----------------------------------------------------------------------------
    async def start(self, repository: str | None = None) -> None:
        """Serve ``repository`` (default: the configured one); return once every model has
        loaded and the endpoints accept connections. Already serving it: nothing to do."""
        async with self._lock:
            path = self.settings.repository_path(self.root_dir, repository)
            if self.state == "running":
                if path is None or path == self.repository:
                    return
                raise AlreadyExistsError(
                    f"already serving {self.repository}; stop the server before serving {path}"
                )
            self.repository = path
            # a remote server serves its own files: the local copy is only for config edits
            if (path is None and not self.remote) or (path is not None and not path.is_dir()):
                where = f"no folder {path}" if path else "no model repository is configured"
                raise NotFoundError(
                    f"{where}: set c.Workbench.model_repository, create model_repository/ "
                    "under the Jupyter root, or give one to server/start"
                )
            await self._start(path)

    async def _start(self, path: Path | None) -> None:
        self.state, self.reason = "starting", ""
        engine = self._new_engine(path)
        self._engine, self._tail = engine, engine.tail
        try:
            endpoints = await engine.start(self.settings.startup_timeout)
        except (WorkbenchError, OSError) as exc:
            self.state, self.reason = "failed", str(exc)
            self._engine = None
            raise UnavailableError(f"the model server did not start: {exc}") from None
        self.endpoints = endpoints
        self.client = TritonClient(endpoints.http_address)
        with contextlib.suppress(WorkbenchError):
            self.server_version = str((await self.client.server_metadata()).get("version", ""))
        self.started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.state = "running"
        self.sampler.clear()
        self._tasks = [
            asyncio.create_task(self._watch(engine)),
            asyncio.create_task(self._sample_forever()),
        ]
        discovery.write_discovery(self.discovery_file, self._discovery_info(path, endpoints))
        self.log.info("[workbench] serving %s at %s", path, endpoints.url)

    def _new_engine(self, path: Path | None) -> Engine:
        if self.settings.remote_url is not None:
            from workbench.jupyter.remote import RemoteEngine

            return RemoteEngine(self.settings.remote_url, self.log)
        assert path is not None, "start() checked it"
        ports = Ports(self.settings.http_port, self.settings.grpc_port, self.settings.metrics_port)
        if self.settings.engine == "tritonserver":
            return TritonEngine(path, self.settings.tritonserver, ports, self.log)
        options = {
            "http_port": ports.http,
            "grpc_port": ports.grpc,
            "metrics_port": ports.metrics,
            **EMBEDDED_OPTIONS,
            **self.settings.server_options,
        }
        return EmbeddedEngine(path, options, self.log)

    def start_in_background(self) -> asyncio.Task[None]:
        """``autostart``: start without holding up Jupyter; a failure shows in ``status``."""

        async def start() -> None:
            try:
                await self.start()
            except WorkbenchError as exc:
                self.log.warning("[workbench] %s", exc)

        return asyncio.ensure_future(start())

    async def stop(self) -> None:
        """Drain, unload and end the server; the discovery file goes first."""
        async with self._lock:
            if self._engine is None:
                self.state, self.reason = "stopped", ""
                return
            self.state = "stopping"
            discovery.remove_discovery(self.discovery_file)
            await self._cancel_tasks()
            engine, self._engine = self._engine, None
            await engine.stop()
            self.endpoints = self.client = None
            self.state, self.reason = "stopped", ""

    async def _cancel_tasks(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            if task is not asyncio.current_task():
                task.cancel()
        for task in tasks:
            if task is not asyncio.current_task():
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _watch(self, engine: Engine) -> None:
        code = await engine.wait()
        if self._engine is not engine or self.state != "running":
            return  # stopped on purpose
        tail = "\n".join(list(engine.tail)[-10:])
        self.state = "failed"
        self.reason = f"the model server exited with code {code}\n{tail}".rstrip()
        self.log.error("[workbench] %s", self.reason)
        discovery.remove_discovery(self.discovery_file)
        self.endpoints = self.client = None
        self._engine = None
        await engine.stop()  # what it left behind: its stub processes
        await self._cancel_tasks()

    # -- statistics ----------------------------------------------------------------------------
    async def _sample_forever(self) -> None:
        while True:
            try:
                await self.sampler.sample()
            except WorkbenchError as exc:
                self.log.debug("[workbench] statistics sample skipped: %s", exc)
            await asyncio.sleep(self.settings.stats_interval)

    async def _statistics(self) -> list[dict[str, Any]]:
        return await self.require_client().statistics()

    async def _metrics(self) -> str:
        url = self.endpoints.metrics_url if self.endpoints is not None else None
        return await fetch_text(url) if url else ""

    # -- what the routes read ------------------------------------------------------------------
    @property
    def remote(self) -> bool:
        """The engine is a URL: a server that runs elsewhere and cannot read our files."""
        return self.settings.remote_url is not None

    @property
    def engine_name(self) -> str:
        """``embedded``, ``tritonserver`` or ``remote``."""
        return "remote" if self.remote else self.settings.engine

    def require_client(self) -> TritonClient:
        """The link to the running server; ``UnavailableError`` (503) saying the state."""
        if self.client is None or self.state != "running":
            detail = f": {self.reason}" if self.reason else ""
            raise UnavailableError(f"the model server is not running ({self.state}){detail}")
        return self.client

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "reason": self.reason,
            "engine": self.engine_name,
            "remote_url": self.settings.remote_url,
            "model_repository": str(self.repository) if self.repository else None,
            "endpoints": self.endpoints.as_dict() if self.endpoints else None,
            "version": __version__,
            "server_version": self.server_version if self.endpoints else "",
            "started": self.started_at if self.endpoints else "",
            "discovery_file": str(self.discovery_file) if self.endpoints else None,
            "log_tail": list(self._tail),
        }

    def _discovery_info(self, path: Path | None, endpoints: Endpoints) -> dict[str, Any]:
        return {
            "jupyter_pid": os.getpid(),
            "server_pid": endpoints.pid,
            "engine": self.engine_name,
            "model_repository": str(path) if path else "",
            "http_url": endpoints.url,
            "http_address": endpoints.http_address,
            "grpc_url": endpoints.grpc_url,
            "metrics_url": endpoints.metrics_url,
            "jupyter_url": self.jupyter_url,
            "proxy_url": self.jupyter_url.rstrip("/") + "/workbench",
            "started": self.started_at,
            "version": __version__,
        }


__all__ = ["EMBEDDED_OPTIONS", "ServerHost"]
