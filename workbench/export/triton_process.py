"""Real tritonserver in a child process on loopback: ephemeral ports, log captured, stopped by
pid (and its own process group, where the python backend's stubs live)."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from workbench._types import StrPath
from workbench.errors import UnavailableError
from workbench.export.tritonserver import TritonBinary, find_tritonserver


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` different ports of ``host`` that were free a moment ago: all bound at once, so
    that the system cannot hand out one twice (one at a time it did: tritonserver then refused
    the same port for HTTP and gRPC)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def _port_clash(log: str) -> bool:
    """Whether tritonserver's log says it could not have its ports (worth new ones)."""
    return "already in use" in log or "at the same address and port" in log


class TritonProcess:
    """tritonserver serving ``repository`` (explicit model control, every model loaded).

    With ``tolerant`` (the default) a model that fails to load does not stop the server
    (``--exit-on-error=false``, ``--strict-readiness=false``); ask ``model_ready``. ``start``
    waits for ``/v2/health/<readiness>``. The attributes mirror
    ``workbench.server.hosting.Server``: ``url``, ``http_address``, ``grpc_url``,
    ``metrics_url``, ``running``, ``start()``, ``stop()``. The tests' side-by-side harness
    (``tests/integration/peers.py``) runs real Triton through this class too.
    """

    #: there is no in-process core to inspect (``Workbench`` checks for it)
    core = None

    def __init__(
        self,
        repository: StrPath,
        *,
        binary: TritonBinary | None = None,
        host: str = "127.0.0.1",
        log_path: StrPath | None = None,
        load_models: Sequence[str] = ("*",),
        model_control_mode: str = "explicit",
        tolerant: bool = True,
        readiness: str = "live",
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float = 15.0,
        extra_args: Sequence[str] = (),
        ports: tuple[int, int, int] = (0, 0, 0),
    ) -> None:
        self.repository = Path(repository).resolve()
        self.model_control_mode = model_control_mode
        self.tolerant = tolerant
        #: ``live`` or ``ready``: the health route ``start`` waits for
        self.readiness = readiness
        self.binary = binary or find_tritonserver()
        self.host = host
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(handle)
            log_path = name
        self.log_path = Path(log_path)
        self.load_models = tuple(load_models) if model_control_mode == "explicit" else ()
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.extra_args = tuple(extra_args)
        #: (HTTP, gRPC, metrics) to listen on; a 0 is a free port, picked at each start
        self.ports = ports
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.process: subprocess.Popen[bytes] | None = None

    # -- addresses, as ``Server`` names them ----------------------------------------------------
    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def url(self) -> str:
        return f"http://{self.http_address}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def command(self) -> list[str]:
        """The tritonserver command line for the current ports."""
        command = [
            str(self.binary.executable),
            f"--model-repository={self.repository}",
            f"--model-control-mode={self.model_control_mode}",
            *(f"--load-model={name}" for name in self.load_models),
            *(["--exit-on-error=false", "--strict-readiness=false"] if self.tolerant else []),
            f"--http-address={self.host}", f"--http-port={self.http_port}",
            "--allow-grpc=true", f"--grpc-address={self.host}", f"--grpc-port={self.grpc_port}",
            "--allow-metrics=true", f"--metrics-address={self.host}",
            f"--metrics-port={self.metrics_port}",
            "--log-verbose=0", "--exit-timeout-secs=5",
        ]  # fmt: skip
        if self.binary.backend_dir is not None:
            command.insert(2, f"--backend-directory={self.binary.backend_dir}")
        return command + list(self.extra_args)

    def log_text(self) -> str:
        """What tritonserver wrote to stdout and stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -- life cycle -----------------------------------------------------------------------------
    def start(self, attempts: int = 3) -> TritonProcess:
        """Start and wait for ``/v2/health/live``; a port clash is retried with new ports."""
        if self.running:
            return self
        for attempt in range(attempts):
            try:
                self._start_once()
            except UnavailableError:
                if attempt + 1 == attempts or not _port_clash(self.log_text()):
                    raise
            else:
                atexit.register(self.stop)
                return self
        raise UnavailableError("tritonserver did not start")  # not reached: the loop raises

    def _start_once(self) -> None:
        # a configured port in use fails the start with Triton's own message
        fresh = iter(_free_ports(self.host, len(self.ports)))
        picked = [wanted or next(fresh) for wanted in self.ports]
        self.http_port, self.grpc_port, self.metrics_port = picked
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.binary.child_env(),
                start_new_session=True,
            )
        failure = self._wait_live()
        if failure is not None:
            self.stop()
            raise UnavailableError(
                f"tritonserver {failure}; log {self.log_path}:\n{self.log_text()[-3000:]}"
            )

    def _wait_live(self) -> str | None:
        """None once the server answers; else why it never did."""
        assert self.process is not None
        route = f"{self.url}/v2/health/{self.readiness}"
        return wait_http(self.process, route, self.startup_timeout_s)

    def stop(self) -> int | None:
        """SIGTERM, SIGKILL after ``stop_timeout_s``, then the stubs left in its group."""
        atexit.unregister(self.stop)
        process, self.process = self.process, None
        return None if process is None else stop_session(process, self.stop_timeout_s)

    def __enter__(self) -> TritonProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def wait_http(process: subprocess.Popen[bytes], url: str, timeout_s: float) -> str | None:
    """Poll ``url`` until it answers 200: None then, else why not (exited, or out of time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"exited with {process.returncode}"
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=1.0) as response:
                if response.status == 200:
                    return None
        time.sleep(0.1)
    return f"did not answer within {timeout_s:.0f}s"


def stop_session(process: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """End a server started with ``start_new_session=True``, and whatever it left behind.

    SIGTERM (a server drains and exits), SIGKILL after ``timeout_s``, then SIGKILL to its
    process group: only processes of that session (its stub or worker processes) are in it.
    Returns the exit code.
    """
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    return process.returncode


__all__ = ["TritonProcess", "stop_session", "wait_http"]
