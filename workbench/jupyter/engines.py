"""The two engines the extension can host, both as child processes of the Jupyter server.

``EmbeddedEngine`` runs ``python -m workbench.jupyter.child`` (the embedded server, see that
module); ``TritonEngine`` runs real tritonserver through ``workbench.export.TritonProcess``.
Both listen on the ``c.Workbench`` ports (0: a free one, picked at start).
Either way the Jupyter server only holds a process and its loopback ports, and talks to it
through Triton's HTTP API; the package docstring says why the server is not in-process. A
third engine, ``remote.RemoteEngine``, hosts nothing: it connects to a server at a URL.

The child's stdout and stderr are read line by line into the Jupyter log (prefixed
``[workbench]``) and a short tail kept for the status route: a model's ``print()`` in a stub
ends up there too, and an unread pipe would block the child once its buffer filled.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from workbench import threads
from workbench.errors import UnavailableError
from workbench.export.triton_process import TritonProcess
from workbench.export.tritonserver import find_tritonserver
from workbench.jupyter.child import READY_PREFIX
from workbench.threads import Work

HOST = "127.0.0.1"
#: lines of the child's output kept for ``status`` (the reason of a failed start)
TAIL_LINES = 40
#: the longest output line kept (a longer one is dropped)
LINE_LIMIT = 1 << 20


@dataclass(frozen=True)
class Endpoints:
    """Where a running server listens (always loopback) and its process id."""

    http_port: int
    grpc_port: int
    metrics_port: int
    pid: int
    host: str = HOST

    @property
    def http_address(self) -> str:
        """``host:port`` as tritonclient and perf_analyzer take it."""
        return f"{self.host}:{self.http_port}"

    @property
    def url(self) -> str:
        return f"http://{self.http_address}"

    @property
    def grpc_url(self) -> str | None:
        return f"{self.host}:{self.grpc_port}" if self.grpc_port else None

    @property
    def metrics_url(self) -> str | None:
        return f"http://{self.host}:{self.metrics_port}/metrics" if self.metrics_port else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "http_url": self.url,
            "http_address": self.http_address,
            "grpc_url": self.grpc_url,
            "metrics_url": self.metrics_url,
            "pid": self.pid,
        }


class Engine(Protocol):
    """A server process the host starts, watches and stops."""

    tail: collections.deque[str]

    async def start(self, timeout_s: float) -> Endpoints: ...

    async def wait(self) -> int:
        """Wait for the process to end (however it ends); its exit code."""
        ...

    async def stop(self) -> None: ...


class EmbeddedEngine:
    """``workbench.jupyter.child`` serving ``repository`` with ``options`` (Server keywords)."""

    def __init__(self, repository: Path, options: dict[str, Any], log: logging.Logger) -> None:
        self.repository = repository
        self.options = {"host": HOST, **options}
        self.log = log
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.process: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._readers: list[asyncio.Task[None]] = []
        self.exit_timeout_s = float(options.get("exit_timeout_secs", 30.0)) + 10.0

    async def start(self, timeout_s: float) -> Endpoints:
        options = {"model_repository": str(self.repository), **self.options}
        self._ready = asyncio.get_running_loop().create_future()
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "workbench.jupyter.child",
            json.dumps(options),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(self.repository.parent),
            # its own session: Ctrl-C in Jupyter's terminal reaches Jupyter only (which then
            # stops the child in order), and stop() can end the stubs with the group
            start_new_session=True,
            limit=LINE_LIMIT,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(self.process.stdout)),
            asyncio.create_task(self._read(self.process.stderr)),
        ]
        fields = await self._wait_ready(self._ready, timeout_s)
        if "error" in fields:
            await self.stop()
            raise UnavailableError(str(fields["error"]))
        return Endpoints(
            int(fields["http_port"]),
            int(fields["grpc_port"]),
            int(fields["metrics_port"]),
            self.process.pid,
        )

    async def _wait_ready(
        self, ready: asyncio.Future[dict[str, Any]], timeout_s: float
    ) -> dict[str, Any]:
        """The ready line's fields; an ``error`` field when the child exited or timed out."""
        assert self.process is not None
        exited: asyncio.Future[Any] = asyncio.ensure_future(self.process.wait())
        waiting: set[asyncio.Future[Any]] = {ready, exited}
        await asyncio.wait(waiting, timeout=timeout_s, return_when="FIRST_COMPLETED")
        if ready.done():
            exited.cancel()
            return ready.result()
        if not exited.done():
            exited.cancel()
            return {"error": f"the model server did not start within {timeout_s:.0f} s"}
        await asyncio.wait(self._readers, timeout=5.0)  # the last lines it wrote
        last = "\n".join(list(self.tail)[-10:])
        code = exited.result()
        return {"error": f"the model server exited ({code}) before it was ready:\n{last}"}

    async def _read(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line longer than LINE_LIMIT: dropped
                continue
            if not line:
                return
            text = line.decode(errors="replace").rstrip()
            if text.startswith(READY_PREFIX) and self._ready is not None:
                if not self._ready.done():
                    self._ready.set_result(json.loads(text.removeprefix(READY_PREFIX)))
                continue
            self.tail.append(text)
            self.log.info("[workbench] %s", text)

    async def wait(self) -> int:
        assert self.process is not None
        return await self.process.wait()

    async def stop(self) -> None:
        """Close its input (it drains and unloads), SIGKILL past the exit timeout, then end
        what is left in its process group (stub processes of a killed server)."""
        process = self.process
        if process is None:
            return
        if process.returncode is None and process.stdin is not None:
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), self.exit_timeout_s)
            except asyncio.TimeoutError:
                self.log.warning("[workbench] the model server did not stop in time: killed")
                process.kill()
                await process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        for reader in self._readers:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(reader, 1.0)


class Ports(NamedTuple):
    """The ports a server is asked to listen on; 0 is a free one, picked at start."""

    http: int = 0
    grpc: int = 0
    metrics: int = 0


class TritonEngine:
    """Real tritonserver on ``repository`` and ``ports`` (loopback), its log in a file.

    ``TritonProcess`` blocks while it starts and stops, so those run in a worker thread.
    """

    def __init__(
        self, repository: Path, binary: str | None, ports: Ports, log: logging.Logger
    ) -> None:
        self.repository = repository
        self.binary = binary
        self.ports = ports
        self.log = log
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.process: TritonProcess | None = None

    async def start(self, timeout_s: float) -> Endpoints:
        self.process = TritonProcess(
            self.repository,
            ports=self.ports,
            binary=find_tritonserver(self.binary),
            host=HOST,
            startup_timeout_s=timeout_s,
            extra_args=["--metrics-config=summary_latencies=true"],
        )
        await threads.run(Work.PROCESS, self.process.start)
        self.log.info("[workbench] tritonserver log: %s", self.process.log_path)
        return Endpoints(
            self.process.http_port,
            self.process.grpc_port,
            self.process.metrics_port,
            int(self.process.pid or 0),
        )

    async def wait(self) -> int:
        process = self.process.process if self.process is not None else None
        if process is None:
            return 0
        code = int(await threads.run(Work.PROCESS, process.wait))
        self._read_tail()  # what the host reports when the server died
        return code

    async def stop(self) -> None:
        if self.process is not None:
            await threads.run(Work.PROCESS, self.process.stop)
            self._read_tail()

    def _read_tail(self) -> None:
        """The last lines of Triton's log file (it writes no pipe that could be read)."""
        assert self.process is not None
        self.tail.clear()
        self.tail.extend(self.process.log_text().splitlines()[-TAIL_LINES:])


__all__ = ["HOST", "Endpoints", "Engine", "EmbeddedEngine", "Ports", "TritonEngine"]
