"""Hosting the server: a background thread for notebooks, the foreground for the CLI.

The server owns one asyncio loop (uvloop when installed) in its own thread, so a Jupyter
kernel's loop is never blocked or replaced. Sockets are bound in the caller's thread, so
"port in use" and a bad repository surface as exceptions from ``start()``, not a dead thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

import uvicorn

from workbench import threads
from workbench._types import StrPath
from workbench.core import InferenceCore
from workbench.errors import UnavailableError, WorkbenchError
from workbench.repository import ModelRepository
from workbench.server import cuda_ipc, heap
from workbench.server.grpc import GrpcFrontend
from workbench.server.http import create_app
from workbench.server.http.endpoints import server_extensions
from workbench.server.http.frontend import HttpFrontend
from workbench.server.listening import bind_socket
from workbench.server.log_settings import LogSettings
from workbench.server.metrics import MetricsService
from workbench.server.options import ServerOptions
from workbench.server.restricted import (
    exposure_warning,
)
from workbench.server.shared_memory import SharedMemoryRegistry

log = logging.getLogger("workbench.server")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when available (it is faster for the many small requests of serving)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _UvicornServer(uvicorn.Server):
    """uvicorn without its own signal handling: ours drains and exits 0 (uvicorn re-raises)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Server:
    """A Triton-compatible inference server for one model repository.

    ``Server("model_repository").start()`` serves in a background thread; ``.url`` is then
    ``http://127.0.0.1:8000`` (or the ephemeral port when ``http_port=0``). Use it as a context
    manager, or call ``.stop()``; ``serve_forever()`` runs in the foreground (the CLI).
    ``model_repository`` may also be remote (``s3://...``, ``gs://...``, ``as://...``, as
    tritonserver takes them): it is copied to a temporary folder at start, deleted at stop.
    ``trace_config`` takes ``--trace-config`` values (``["triton,file=/tmp/t.json",
    "level=TIMESTAMPS"]``); the trace extension changes them at run time.
    """

    def __init__(
        self,
        model_repository: StrPath | Sequence[StrPath],
        options: ServerOptions | None = None,
        **keywords: Any,
    ) -> None:
        """``options``, or the keywords of ``ServerOptions.from_keywords`` (``http_port=0``,
        ``model_control_mode="explicit"``, ...), each named after a tritonserver flag."""
        if options is not None and keywords:
            raise TypeError("Server() takes options or keywords, not both")
        self.model_repository = model_repository
        self.options = options if options is not None else ServerOptions.from_keywords(**keywords)
        self.core: InferenceCore | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._http: HttpFrontend | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._bound_port = 0
        self._metrics_socket: socket.socket | None = None
        self._metrics_port = 0
        self._metrics_uvicorn: uvicorn.Server | None = None
        #: when the exit was asked for, plus ``exit_timeout_secs``: the exit's one deadline
        self._exit_deadline: float | None = None
        #: False when the last exit ran past ``exit_timeout_secs`` (what still ran was ended)
        self.stopped_in_time = True
        self._metrics_task: asyncio.Task[None] | None = None
        self._grpc: GrpcFrontend | None = None
        self._grpc_port = 0
        #: the registered shared-memory regions, shared by HTTP and gRPC; unmapped at stop
        #: (CUDA regions where this machine has an NVIDIA driver and GPU)
        self.shared_memory = SharedMemoryRegistry(cuda=cuda_ipc.driver())
        self._extensions = server_extensions(self.shared_memory.cuda is not None)
        self._started = threading.Event()
        self._error: BaseException | None = None
        #: the repository served, opened by ``_bind``; closed at stop when the server opened it
        self._repository: ModelRepository | None = None
        self._owns_repository = False

    # -- properties ----------------------------------------------------------------------------
    @property
    def http_port(self) -> int:
        """The port listened on (the ephemeral one once started with ``http_port=0``)."""
        return self._bound_port or self.options.http_port

    @property
    def url(self) -> str:
        return f"http://{_address(self.options.host, self.http_port)}"

    @property
    def http_address(self) -> str:
        """``host:port`` as tritonclient and perf_analyzer take it."""
        return self.url.removeprefix("http://")

    @property
    def grpc_port(self) -> int:
        """The gRPC port (the ephemeral one once started with ``grpc_port=0``); 0 when off."""
        if self.options.grpc is None:
            return 0
        return self._grpc_port or self.options.grpc.port

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint, as ``tritonclient.grpc`` takes it."""
        return _address(self.options.grpc.address if self.options.grpc else "", self.grpc_port)

    @property
    def metrics_port(self) -> int:
        """The metrics port (the ephemeral one once started with ``metrics_port=0``); 0 when off."""
        if self.options.metrics is None:
            return 0
        return self._metrics_port or self.options.metrics.port

    @property
    def metrics_url(self) -> str:
        """Where Prometheus scrapes: ``http://host:port/metrics``."""
        address = self.options.metrics.address if self.options.metrics else ""
        return f"http://{_address(address, self.metrics_port)}/metrics"

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._error is None

    # -- background hosting --------------------------------------------------------------------
    def start(self, timeout_s: float = 300.0) -> Server:
        """Start in a background thread; return once models are loaded and HTTP accepts."""
        if self._thread is not None:
            raise UnavailableError("server already started")
        self._bind()
        self._exit_deadline, self.stopped_in_time = None, True
        self._thread = threads.start("workbench-server", self._thread_main)
        if not self._started.wait(timeout_s):
            self.stop()
            raise UnavailableError(f"server did not start within {timeout_s:.0f} s")
        if self._error is not None:
            error = self._error
            self._thread.join(timeout=10)
            self._thread = None
            raise error
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        """Drain in-flight requests (up to ``exit_timeout_secs``), unload models, join."""
        thread = self._thread
        if thread is None:
            return
        if self.loop is not None and self._http is not None:
            self.loop.call_soon_threadsafe(self._request_exit_quietly)
        thread.join(timeout_s if timeout_s is not None else self.options.exit_timeout_secs + 30)
        self._thread = None

    def __enter__(self) -> Server:
        return self.start() if self._thread is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _bind(self) -> None:
        """Open the repository, then take every port, before any model loads: each mistake
        is reported as itself, and at once (a wrong path or remote URL, even when a port is
        busy). A remote repository is copied to a local folder here, deleted at stop."""
        self._repository = self._open_repository()
        try:
            self._bind_ports()
        except BaseException:
            self._close_repository()
            raise
        self._warn_if_exposed()

    def _open_repository(self) -> ModelRepository:
        if isinstance(self.model_repository, ModelRepository):
            self._owns_repository = False  # the caller's: left open at stop
            return self.model_repository
        self._owns_repository = True
        return ModelRepository(self.model_repository)

    def _close_repository(self) -> None:
        if self._repository is not None and self._owns_repository:
            self._repository.close()
        self._repository = None

    def _bind_ports(self) -> None:
        grpc = self.options.grpc
        if grpc is not None and grpc.port != 0:
            # grpc binds only once the models are loaded, and logs its own failure in a raw
            # line: a probe says "in use" now (a port taken in between still fails later)
            bind_socket(grpc.address, grpc.port).close()
        self._socket = bind_socket(self.options.host, self.options.http_port)
        self._bound_port = int(self._socket.getsockname()[1])
        metrics = self.options.metrics
        if metrics is not None:
            try:
                self._metrics_socket = bind_socket(metrics.address, metrics.port)
            except UnavailableError:
                self._close_socket()
                raise
            self._metrics_port = int(self._metrics_socket.getsockname()[1])

    def _warn_if_exposed(self) -> None:
        """Say so when an endpoint that can change the repository listens beyond loopback."""
        core = self.options.core
        explicit = core.control_mode == "explicit"
        endpoints = [("HTTP", self.options.host, self.options.http_restrictions)]
        if self.options.grpc is not None:
            endpoints.append(("gRPC", self.options.grpc.address, self.options.grpc.restrictions))
        for endpoint, address, restrictions in endpoints:
            warning = exposure_warning(
                endpoint, address, restrictions, explicit, core.allow_model_upload
            )
            if warning is not None:
                log.warning("%s", warning)

    def _thread_main(self) -> None:
        loop = new_event_loop()
        self.loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the caller of start()
            self._error = exc
        finally:
            self._close_socket()
            self._close_repository()
            self._started.set()
            loop.close()

    def _close_socket(self) -> None:
        for sock in (self._socket, self._metrics_socket):
            if sock is not None:
                sock.close()
        self._socket = self._metrics_socket = None

    # -- foreground hosting --------------------------------------------------------------------
    def serve_forever(self) -> bool:
        """Serve in the calling (main) thread; SIGINT/SIGTERM drain requests, then exit.

        Returns whether everything stopped within ``exit_timeout_secs`` (else what still ran
        was ended: tritonserver then exits 1, "Exit timeout expired. Exiting immediately.")."""
        self._bind()
        self._exit_deadline, self.stopped_in_time = None, True
        loop = new_event_loop()
        self.loop = loop
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._request_exit)
        try:
            loop.run_until_complete(self._serve())
        finally:
            self._close_socket()
            self._close_repository()
            loop.close()
        return self.stopped_in_time

    def _request_exit(self) -> None:
        log.info("signal received: draining in-flight requests, then exiting")
        self._request_exit_quietly()

    def _request_exit_quietly(self) -> None:
        if self._exit_deadline is None:  # one budget from here for every stage of the exit
            self._exit_deadline = time.monotonic() + self.options.exit_timeout_secs
        if self._http is not None:
            self._http.request_exit()

    def _exit_time_left(self) -> float:
        if self._exit_deadline is None:
            return self.options.exit_timeout_secs
        return max(0.0, self._exit_deadline - time.monotonic())

    async def _serve(self) -> None:
        assert self._repository is not None  # opened by _bind()
        heap.tune()  # malloc's thresholds for tensors of about 1 MiB (see heap.py)
        core = InferenceCore(self._repository, self.options.core)
        self.core = core
        # Before the core starts, so that it sees model loads (load durations).
        metrics = MetricsService(core, self.options.metrics) if self.options.metrics else None
        try:
            await core.start()
            log_settings = LogSettings()
            await self._start_grpc(core, log_settings)
            if metrics is not None:
                await self._start_metrics(metrics)
            app = create_app(
                core,
                max_input_bytes=self.options.max_input_bytes,
                log_settings=log_settings,
                restrictions=self.options.http_restrictions,
                extensions=self._extensions,
                shared_memory=self.shared_memory,
                tracer=core.tracer,
            )
            assert self._socket is not None
            limits = self.options.http_limits
            self._http = HttpFrontend(
                app,
                self._socket,
                self.options.exit_timeout_secs,
                idle_timeout_s=limits.idle_timeout_s,
                header_timeout_s=limits.header_timeout_s,
                max_header_bytes=limits.max_header_bytes,
            )
            await self._http.start()
            # tritonserver's wording, so scripts that wait for this line keep working.
            log.info("Started HTTPService at %s:%d", self.options.host, self.http_port)
            self._started.set()
            await self._http.serve()
        finally:
            await self._stop_frontends(metrics)
            self.shared_memory.close()
            self.stopped_in_time = await core.stop(self._exit_time_left())

    def _metrics_config(self, app: Callable[..., Any]) -> uvicorn.Config:
        return uvicorn.Config(
            app,
            lifespan="off",
            access_log=False,
            log_level="warning" if self.options.log_verbose == 0 else "info",
            timeout_graceful_shutdown=int(self.options.exit_timeout_secs),
            http="httptools",
            proxy_headers=False,  # not a proxy; saves a middleware on every request
        )

    async def _start_grpc(self, core: InferenceCore, log_settings: LogSettings) -> None:
        options = self.options.grpc
        if options is None:
            return
        self._grpc = GrpcFrontend(
            core,
            options,
            log_settings=log_settings,
            extensions=self._extensions,
            shared_memory=self.shared_memory,
            tracer=core.tracer,
        )
        self._grpc_port = await self._grpc.start()
        log.info(
            "Started GRPCInferenceService at %s:%d (%s)",
            options.address,
            self._grpc_port,
            "gRPC C++ server" if self._grpc.implementation == "native" else "grpcio",
        )

    async def _start_metrics(self, metrics: MetricsService) -> None:
        assert self._metrics_socket is not None and self.options.metrics is not None
        await metrics.start()
        self._metrics_uvicorn = _UvicornServer(self._metrics_config(metrics))
        serve = self._metrics_uvicorn.serve(sockets=[self._metrics_socket])
        self._metrics_task = asyncio.create_task(serve)
        await _wait_started(self._metrics_uvicorn, self._metrics_task, "metrics")
        log.info(
            "Started Metrics Service at %s:%d", self.options.metrics.address, self.metrics_port
        )

    async def _stop_frontends(self, metrics: MetricsService | None) -> None:
        """After HTTP has drained: gRPC drains for the same grace period, metrics stop last."""
        if self._grpc is not None:
            await self._grpc.stop(self._exit_time_left())
            self._grpc = None
        if self._metrics_uvicorn is not None and self._metrics_task is not None:
            self._metrics_uvicorn.should_exit = True
            await asyncio.wait([self._metrics_task], timeout=5)
            self._metrics_uvicorn = self._metrics_task = None
        if metrics is not None:
            await metrics.stop()


async def _wait_started(server: uvicorn.Server, serving: asyncio.Task[None], what: str) -> None:
    while not server.started and not serving.done():
        await asyncio.sleep(0.005)
    if serving.done() and serving.exception() is not None:
        raise WorkbenchError(f"{what} server failed to start: {serving.exception()}")


def _address(host: str, port: int) -> str:
    """``host:port`` for clients: a wildcard address is reached on loopback."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"{shown}:{port}"
