"""The load generator's own process, so that a sweep measures the server and not a shared GIL.

A sweep runs in the process that hosts the embedded server (a notebook kernel). A load
generator there competes with the server's loop for one GIL, and the numbers become the
client's. ``LoadProcess`` therefore runs ``closed_loop`` in one worker process per sweep and
hands it jobs over a socket: a picklable ``LoadPlan`` (what to send), a concurrency and a
duration; the worker answers with the ``LoadResult``.

The worker is a fresh interpreter (``python -c``): not a fork, since the kernel has threads,
and not ``multiprocessing``'s spawn either, which re-runs the user's ``__main__`` script in
the child (a script without a ``__main__`` guard would start a second server there). Stop is
a message the worker reads while it runs; a worker that dies closes its end of the socket, and
the job it had becomes a ``LoadProcessError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from workbench.bench.load_generator import InferSender, LoadResult, closed_loop, error_text
from workbench.bench.senders import InferCall
from workbench.errors import InternalError

#: how often the sweep looks for the worker's answer and for Stop
POLL_S = 0.02
#: a stopped worker still waits for its requests in flight; past this it is ended
STOP_GRACE_S = 5.0
#: how long a worker gets to exit after its connection is closed, before it is killed
EXIT_GRACE_S = 3.0

_plan_tokens = itertools.count(1)


@dataclass(frozen=True, eq=False)
class LoadPlan:
    """What the worker sends again and again: one model's request over one protocol."""

    protocol: str
    url: str
    call: InferCall
    #: names the plan, so the worker keeps one sender (and its connections) across jobs
    token: int = field(default_factory=lambda: next(_plan_tokens))

    def sender(self) -> InferSender:
        return InferSender(self.protocol, self.url, self.call)


@dataclass(frozen=True)
class _Job:
    number: int
    plan: LoadPlan
    concurrency: int
    duration_s: float


@dataclass(frozen=True)
class _Stop:
    number: int


@dataclass(frozen=True)
class _Reply:
    number: int
    pid: int
    result: LoadResult | None = None
    error: str = ""


class LoadProcessError(InternalError):
    """The worker died, did not stop, or could not run the job: that measurement failed."""


class LoadProcess:
    """The sweep's side of one worker process: started on the first job, started afresh after
    one dies, ended by ``close()``."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._jobs = itertools.count(1)
        #: the pid of every worker started, in order
        self.pids: list[int] = []

    @property
    def pid(self) -> int | None:
        """The running worker's pid (None when there is none)."""
        return self._process.pid if self._process is not None else None

    async def run(
        self, plan: LoadPlan, concurrency: int, duration_s: float, stop: threading.Event
    ) -> LoadResult:
        """Run ``closed_loop`` in the worker; ``stop`` set here stops it there."""
        conn = self._connection()
        job = _Job(next(self._jobs), plan, concurrency, duration_s)
        try:
            conn.send(job)
        except OSError:
            raise self._died(concurrency) from None
        reply = await self._reply(conn, job.number, stop, concurrency)
        if reply.result is None:
            raise LoadProcessError(reply.error)
        return reply.result

    async def _reply(
        self, conn: Connection, number: int, stop: threading.Event, concurrency: int
    ) -> _Reply:
        stopped_at: float | None = None
        # Polling keeps the sweep's loop free and notices Stop, which is set on another thread.
        while not conn.poll():
            if stop.is_set() and stopped_at is None:
                stopped_at = time.monotonic()
                with contextlib.suppress(OSError):  # a dead worker shows as EOF below
                    conn.send(_Stop(number))
            elif stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE_S:
                self.close()
                raise LoadProcessError(
                    f"the load generator did not stop within {STOP_GRACE_S:g} s of Stop "
                    "(its requests were still in flight), so it was ended"
                )
            await asyncio.sleep(POLL_S)
        try:
            reply: _Reply = conn.recv()
        except (EOFError, OSError):
            raise self._died(concurrency) from None
        return reply

    def _connection(self) -> Connection:
        if self._process is None or self._conn is None or self._process.poll() is not None:
            self.close()
            self._start()
        assert self._conn is not None
        return self._conn

    def _start(self) -> None:
        if not sys.executable:
            raise LoadProcessError("no Python executable to start the load generator with")
        ours, theirs = socket.socketpair()
        command = [
            sys.executable,
            "-c",
            f"from workbench.bench.load_process import serve; serve({theirs.fileno()})",
        ]
        try:
            self._process = subprocess.Popen(
                command,
                pass_fds=(theirs.fileno(),),
                env=_worker_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal goes to the sweep, not the worker
            )
        except OSError as exc:
            ours.close()
            raise LoadProcessError(f"could not start the load generator: {exc}") from exc
        finally:
            theirs.close()  # only the worker holds its end, so its death reads as EOF here
        self._conn = Connection(ours.detach())
        self.pids.append(self._process.pid)

    def _died(self, concurrency: int) -> LoadProcessError:
        process = self._process
        self.close()
        pid = process.pid if process is not None else "?"
        how = _exit_text(process.returncode if process is not None else None)
        return LoadProcessError(
            f"the load generator process (pid {pid}) ended while measuring concurrency "
            f"{concurrency} ({how}); this point was not measured"
        )

    def close(self) -> None:
        """End the worker: it sees its connection close and exits, or is killed after a grace."""
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return
        try:
            process.wait(EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _worker_env() -> dict[str, str]:
    """The environment with this ``workbench`` first on the path, installed or not."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    previous = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{root}{os.pathsep}{previous}" if previous else root
    return env


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return "it stopped answering"
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return f"exit code {returncode}; its stderr says why"


# -- the worker's side -----------------------------------------------------------------------------


class _Worker:
    """Runs jobs from one connection on one event loop, so clients live across jobs."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.loop = _new_loop()
        self.stop = threading.Event()
        self.job = 0
        self.parent_gone = False
        self.sender: InferSender | None = None
        self.token = 0

    def serve(self) -> None:
        while not self.parent_gone:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                return
            if isinstance(message, _Job):
                self.conn.send(self.run(message))

    def run(self, job: _Job) -> _Reply:
        self.stop.clear()
        self.job = job.number
        self.loop.add_reader(self.conn.fileno(), self._on_message)
        # uvloop makes a watched fd non-blocking; recv() must read whole messages
        os.set_blocking(self.conn.fileno(), True)
        try:
            result = self.loop.run_until_complete(self._measure(job))
        except Exception as exc:  # reported to the sweep, which records the point as failed
            return _Reply(
                job.number, os.getpid(), error=f"the load generator failed: {error_text(exc)}"
            )
        finally:
            self.loop.remove_reader(self.conn.fileno())
            os.set_blocking(self.conn.fileno(), True)
        return _Reply(job.number, os.getpid(), result)

    async def _measure(self, job: _Job) -> LoadResult:
        if self.sender is None or self.token != job.plan.token:
            await self.close_sender()
            self.sender, self.token = job.plan.sender(), job.plan.token
        return await closed_loop(self.sender, job.concurrency, job.duration_s, self.stop)

    def _on_message(self) -> None:
        try:
            message = self.conn.recv()
        except (EOFError, OSError):  # the sweep ended or died: finish up and exit
            self.parent_gone = True
            self.stop.set()
            self.loop.remove_reader(self.conn.fileno())
            return
        if isinstance(message, _Stop) and message.number == self.job:
            self.stop.set()

    async def close_sender(self) -> None:
        if self.sender is not None:
            with contextlib.suppress(Exception):  # closing must not hide the measurement
                await self.sender.close()
            self.sender = None

    def close(self) -> None:
        self.loop.run_until_complete(self.close_sender())
        self.loop.close()
        self.conn.close()


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (as the server uses): less client CPU per request."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve(fd: int) -> None:
    """The worker's main: run jobs from the socket ``fd`` until the sweep closes it."""
    worker = _Worker(Connection(fd))
    try:
        with contextlib.suppress(OSError):  # the sweep went away mid-answer
            worker.serve()
    finally:
        worker.close()


__all__ = ["LoadPlan", "LoadProcess", "LoadProcessError", "serve"]
