"""The server's side of one stub process: start it, call it, serve its calls, stop it.

One ``StubProcess`` is one child process; when a stub dies the instance starts a new one
(``_server_instance``). The child runs ``workbench.backends.python.stub`` (``_BOOT``) through
``subprocess`` (fork+exec: safe from a multi-threaded server or a Jupyter kernel) and inherits
only its socket and the two shared-memory regions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench import shared_buffers, threads
from workbench.backends.base import ExecRequest, ExecResult, InferenceClient, fail_all
from workbench.backends.exit_deadline import ExitDeadline
from workbench.backends.python._execution_env import ExecutionEnv
from workbench.backends.python._model_loader import ADDED_PATHS
from workbench.backends.python._model_runner import ModelSpec
from workbench.backends.python._server_calls import StubCalls
from workbench.backends.python._server_metrics import REGISTRY
from workbench.backends.python._server_reader import LoopReader
from workbench.backends.python._wire_channel import Channel, ChannelClosed, Message
from workbench.backends.python._wire_messages import (
    EXECUTE,
    FINALIZE,
    INIT,
    LOG,
    METRICS,
    REPLY,
    RESPONSE,
    TraceTable,
    error_from_wire,
    read_results,
    write_requests,
)
from workbench.backends.python._wire_shm import BlockWriter, Region, create_region_fd
from workbench.errors import InternalError, WorkbenchError

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StubLaunch:
    """Everything needed to start (and restart) the stub of one instance."""

    instance_name: str
    model_file: Path
    spec: ModelSpec
    #: what ``initialize(args)`` receives
    args: dict[str, str]
    client: InferenceClient | None
    #: the server's: bounds the wait for ``finalize`` at exit, and kills the stub past it
    exit_deadline: ExitDeadline = field(default_factory=ExitDeadline)
    #: the model's ``EXECUTION_ENV_PATH`` environment (None: the server's interpreter)
    env: ExecutionEnv | None = None


def unhealthy(instance_name: str) -> InternalError:
    """The error of the requests a dead stub had in flight (Triton's wording)."""
    return InternalError(
        f"Failed to process the request(s) for model instance '{instance_name}', "
        f"message: Stub process '{instance_name}' is not healthy."
    )


#: ``python -c`` (or ``-m``) would put the working directory first on ``sys.path``, so a
#: ``workbench`` folder there would be imported instead of the server's own. Dropping that entry
#: (none is added under ``PYTHONSAFEPATH``) leaves ``PYTHONPATH`` (the server's package root,
#: see ``_child_command``) first; the model's own import paths, the working directory included,
#: arrive with INIT.
_BOOT = (
    "import sys, runpy\n"
    "if not getattr(sys.flags, 'safe_path', False): del sys.path[0]  # -P added none\n"
    "runpy.run_module('workbench.backends.python.stub', run_name='__main__', alter_sys=True)"
)


#: In a model's own environment (``_execution_env``) the server's package root is not put on
#: ``sys.path``, where it could hold all of the server's packages (a site-packages folder) and
#: shadow the environment's: ``workbench`` alone is imported from it, then the server's import
#: paths follow the environment's when both run the same Python version.
_ENV_BOOT = (
    "import sys, os, runpy, importlib.util\n"
    "if not getattr(sys.flags, 'safe_path', False): del sys.path[0]  # -P added none\n"
    "root = os.environ.pop('WORKBENCH_STUB_ROOT')\n"
    "later = os.environ.pop('WORKBENCH_STUB_PATHS', '').split(os.pathsep)\n"
    "sys.path.extend(p for p in later if p and p not in sys.path)\n"
    "spec = importlib.util.spec_from_file_location('workbench', os.path.join(root, 'workbench', "
    "'__init__.py'), submodule_search_locations=[os.path.join(root, 'workbench')])\n"
    "sys.modules['workbench'] = module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "runpy.run_module(os.environ.pop('WORKBENCH_STUB_MODULE'), run_name='__main__', "
    "alter_sys=True)"
)
#: what a stub process runs
STUB_MODULE = "workbench.backends.python.stub"
#: the folder holding ``workbench/``
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])


def _server_paths() -> list[str]:
    """The server's import paths a stub may use ("" as the working directory; not the folders
    of other models)."""
    return [p or os.getcwd() for p in sys.path if p not in ADDED_PATHS]


def _child_command(
    env: ExecutionEnv | None, fds: Sequence[int]
) -> tuple[list[str], dict[str, str]]:
    """The stub's command line and environment variables."""
    arguments = [*map(str, fds)]
    if env is not None:
        return env_command(env, STUB_MODULE, arguments)
    variables = _child_variables()
    path = (_PACKAGE_ROOT, variables.get("PYTHONPATH"))
    variables["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    return [sys.executable, "-c", _BOOT, *arguments], variables


def _child_variables() -> dict[str, str]:
    variables = dict(os.environ)
    variables["PYTHONUNBUFFERED"] = "1"  # print() in a model shows up as it happens
    return variables


def env_command(
    env: ExecutionEnv, module: str, arguments: Sequence[str]
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment variables that run ``module`` as ``__main__`` in
    ``env`` (its ``workbench`` the server's; see ``_ENV_BOOT``)."""
    variables = _child_variables()
    variables["WORKBENCH_STUB_ROOT"] = _PACKAGE_ROOT
    variables["WORKBENCH_STUB_MODULE"] = module
    if env.shares_server_packages:
        variables["WORKBENCH_STUB_PATHS"] = os.pathsep.join(_server_paths())
    return env.command(["-c", _ENV_BOOT, *arguments]), env.environ(variables)


def _reap(proc: subprocess.Popen[bytes], sock: socket.socket, fds: list[int]) -> None:
    """Kill the child if it still runs and release what connected us (runs once)."""
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL pending in the kernel
        _log.error("stub process %d did not exit after SIGKILL", proc.pid)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    for fd in fds:
        os.close(fd)


class StubGone(ChannelClosed):
    """The stub was dead before a call reached it: nothing was in flight."""


#: the name ``/proc/<pid>/fd`` shows for the server's region towards a stub (``/memfd:...``)
TO_STUB_NAME = "workbench-to-stub"


class StubProcess:
    """One child process running one model instance."""

    def __init__(
        self,
        launch: StubLaunch,
        bls_pool: Executor,
        on_death: Callable[[StubProcess], None],
    ) -> None:
        self.launch = launch
        self._bls_pool = bls_pool
        self._on_death = on_death
        self._keys = itertools.count(1)
        self._open: dict[int, ExecRequest] = {}
        self._open_lock = threading.Lock()
        #: the traces of the requests in the stub (BLS calls name them to be traced as children)
        self._traces: TraceTable = {}
        self._stopping = False
        #: ended on purpose (``end``: the exit ran out of time): not to be restarted
        self.abandoned = False
        self._end_lock = threading.Lock()
        #: whether the stub maps the server's shared buffers (``initialize`` finds out)
        self._share = False
        #: the owner of the custom metrics this stub creates (they end with it)
        self.metrics_owner = object()
        self._reader: threading.Thread | None = None
        self._loop_reader: LoopReader | None = None
        ours, theirs = socket.socketpair()
        to_stub = create_region_fd(name=TO_STUB_NAME)
        from_stub = create_region_fd(name="workbench-from-stub")
        fds = (theirs.fileno(), to_stub, from_stub)
        try:
            command, variables = _child_command(launch.env, fds)
            self.proc = subprocess.Popen(
                command,
                pass_fds=fds,
                env=variables,
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            for handle in (ours, theirs):
                handle.close()
            os.close(to_stub)
            os.close(from_stub)
            raise InternalError(f"failed to start the stub process: {exc}") from exc
        finally:
            theirs.close()
        self._finalizer = weakref.finalize(self, _reap, self.proc, ours, [to_stub, from_stub])
        self._to_stub = BlockWriter(Region(to_stub))
        self._from_stub = Region(from_stub)
        self.channel = Channel(ours, self._route, alive=self.alive)
        self._calls = StubCalls(
            launch.client, self.channel, self._to_stub, self._from_stub, self._traces
        )
        launch.exit_deadline.watch(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_description(self, wait_s: float = 0.0) -> str:
        """How the child ended, for the log ("exited with code 1", "killed by SIGSEGV").

        ``wait_s``: how long to let a dying child finish exiting first.
        """
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=wait_s)
        code = self.proc.poll()
        if code is None:
            return "is still running"
        if code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with code {code}"

    # -- calls into the stub -------------------------------------------------------------------
    def initialize(self) -> None:
        """Load the model in the child and run ``initialize``; failures raise."""
        launch = self.launch
        setup = {
            "spec": asdict(launch.spec),
            "model_file": str(launch.model_file),
            "args": launch.args,
            "client": launch.client is not None,
            # "" (a notebook's working directory) as a path: the stub's own "" was dropped. A
            # stub in an environment had the server's paths (when it may) at its boot.
            "sys_path": _server_paths() if launch.env is None else [os.getcwd()],
            # the stub tries to map it: whether large request bodies reach it without a copy
            "shared_probe": shared_buffers.probe_ref(),
        }
        key = next(self._keys)
        try:
            self.channel.send((INIT, key, setup))
            reply = self.channel.wait(key)
            error = error_from_wire(reply[2])
            self._share = len(reply) > 3 and bool(reply[3])
        except ChannelClosed:
            error = InternalError(
                f"Stub process '{launch.instance_name}' is not healthy: it "
                f"{self.exit_description(wait_s=1.0)} while initializing"
            )
        if error is not None:
            raise error
        if launch.spec.decoupled:
            # Decoupled responses arrive at any time: a reader thread routes them.
            name = f"{launch.instance_name}-stub-reader"
            self._reader = threads.start(name, self._pump)

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """One ``execute`` in the child.

        Raises ``StubGone`` if the child was already dead (the requests never reached it) and
        ``ChannelClosed`` if it died while they were in flight.
        """
        key = next(self._keys)
        tokens = list(itertools.islice(self._keys, len(requests)))
        decoupled = self.launch.spec.decoupled
        block, wires = write_requests(self._to_stub, requests, tokens, self._traces, self._share)
        if decoupled:  # open before the stub may answer: its responses name these tokens
            with self._open_lock:
                self._open.update(zip(tokens, requests, strict=True))
        try:
            self.channel.send((EXECUTE, key, block, wires))
        except ChannelClosed:
            with self._open_lock:
                for token in tokens:
                    self._open.pop(token, None)
            self._forget(requests)
            raise StubGone from None
        try:
            _, _, out_block, out_wires = self.channel.wait(key)
        finally:
            if not decoupled:  # a decoupled request's trace lives until its final response
                self._forget(requests)
        if decoupled:
            return [ExecResult() for _ in requests]
        return read_results(self._from_stub, out_block, out_wires)  # type: ignore[return-value]

    async def execute_async(
        self, requests: Sequence[ExecRequest], loop: asyncio.AbstractEventLoop
    ) -> list[ExecResult] | None:
        """``execute`` from the event loop, which reads the reply itself (non-decoupled);
        None when this loop cannot read the channel (nothing was sent)."""
        reader = self._reader_on(loop)
        if reader is None:
            return None
        reply = reader.expect(self._send_execute(requests))
        try:
            _, _, out_block, out_wires = await reply
        finally:
            self._forget(requests)
        return read_results(self._from_stub, out_block, out_wires)  # type: ignore[return-value]

    def start_execute(
        self,
        requests: Sequence[ExecRequest],
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[list[ExecResult] | None, BaseException | None], None],
    ) -> bool:
        """Send one ``execute`` now, from the loop; ``on_done(results, error)`` runs on the
        loop as soon as the reply is read (no task, no future: nothing waits a loop turn).

        False when the loop cannot read this channel (a thread does): nothing was sent.
        Raises ``StubGone`` if the child was already dead (the requests never reached it);
        ``on_done`` gets ``ChannelClosed`` if it dies while they are in flight.
        """
        reader = self._reader_on(loop)
        if reader is None:
            return False

        def replied(reply: Message | None, error: BaseException | None) -> None:
            self._forget(requests)
            if reply is None:
                on_done(None, error)
                return
            try:
                results: Sequence[ExecResult | None] = read_results(
                    self._from_stub, reply[2], reply[3]
                )
            except Exception as exc:  # a reply we cannot read fails these requests, not others
                _log.exception("reading the reply of stub %d failed", self.pid)
                results = fail_all(len(requests), InternalError(f"unreadable stub reply: {exc}"))
            on_done(results, None)  # type: ignore[arg-type]

        reader.expect_call(self._send_execute(requests), replied)
        return True

    def _reader_on(self, loop: asyncio.AbstractEventLoop) -> LoopReader | None:
        """This channel's reader on ``loop`` (attached now if need be), or None."""
        reader = self._loop_reader
        if reader is not None and reader.loop is loop and reader.attached:
            return reader
        if reader is not None:
            reader.detach()
        reader = LoopReader(self.channel, loop, self.alive, self._orphan)
        if not reader.attach():
            return None
        self._loop_reader = reader
        return reader

    def _send_execute(self, requests: Sequence[ExecRequest]) -> int:
        """Write the inputs and send the call; its key. ``StubGone`` when the child is gone."""
        key = next(self._keys)
        tokens = list(itertools.islice(self._keys, len(requests)))
        block, wires = write_requests(self._to_stub, requests, tokens, self._traces, self._share)
        try:
            self.channel.send((EXECUTE, key, block, wires))
        except ChannelClosed:
            self._forget(requests)
            raise StubGone from None
        return key

    def _forget(self, requests: Sequence[ExecRequest]) -> None:
        """Drop the traces of answered requests (nothing to do when none was traced)."""
        if self._traces:
            for request in requests:
                if request.trace is not None:
                    self._traces.pop(request.trace.id, None)

    def _orphan(self, reply: Message) -> None:
        """The answer to a call whose caller was cancelled: release its shared memory."""
        read_results(self._from_stub, reply[2], reply[3])

    # -- messages from the stub ----------------------------------------------------------------
    def _route(self, message: Message) -> Hashable | None:
        kind = message[0]
        if kind == REPLY:
            return message[1]
        if kind == METRICS:
            REGISTRY.apply(self.metrics_owner, message[2])
        elif kind == RESPONSE:
            self._on_response(message)
        elif kind == LOG:
            _, _, level, name, text = message
            logging.getLogger(name).log(level, "%s", text)
        else:  # BLS or READY: may take long, never on the reading thread
            try:
                self._bls_pool.submit(self._calls.serve, message)
            except RuntimeError:  # the instance is closing
                self._calls.refuse(message, InternalError("the model instance is closing"))
        return None

    def _on_response(self, message: Message) -> None:
        _, token, final, block, wire = message
        [result] = read_results(self._from_stub, block, [wire])
        with self._open_lock:
            request = self._open.pop(token, None) if final else self._open.get(token)
        if request is None:
            return
        if final:
            self._forget([request])
        if request.respond is not None:
            request.respond(result, final)

    def _pump(self) -> None:
        self.channel.pump()
        if not self._stopping:
            self._on_death(self)

    # -- endings -------------------------------------------------------------------------------
    def fail_open(self, error: WorkbenchError) -> None:
        """End every decoupled stream still open with ``error``."""
        with self._open_lock:
            requests = list(self._open.values())
            self._open.clear()
        self._traces.clear()
        for request in requests:
            if request.respond is not None:
                request.respond(ExecResult(error=error), True)

    def shutdown(self, finalize_timeout_s: float, exit_timeout_s: float) -> None:
        """Ask the child to ``finalize`` and exit; kill it when a bounded wait runs out.

        Once the server exits, both waits end at its exit deadline at the latest."""
        self._stopping = True
        if self._loop_reader is not None:
            self._loop_reader.detach()  # this thread reads the answer (the loop may be gone)
        deadline = self.launch.exit_deadline
        wait_s = deadline.remaining(finalize_timeout_s)
        key = next(self._keys)
        try:
            self.channel.send((FINALIZE, key))
            self.channel.wait(key, timeout_s=wait_s)
        except TimeoutError:
            late = f"finalize did not return within {wait_s:.1f} s"
            self.end("the exit timeout expired" if wait_s < finalize_timeout_s else late)
            return
        except ChannelClosed:
            pass
        else:  # finalized: it exits on its own
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=deadline.remaining(exit_timeout_s))
        self.kill()

    def end(self, reason: str) -> None:
        """Kill the child now, saying why in the log; its instance will not start another."""
        with self._end_lock:
            first, self.abandoned = not self.abandoned, True
        if first and self.proc.poll() is None:
            _log.warning(
                "stub process '%s' (pid %d) killed: %s", self.launch.instance_name, self.pid, reason
            )
        self.kill()

    def kill(self) -> None:
        """Kill the child (if it still runs) and release the connection; idempotent."""
        self._stopping = True
        if self.proc.poll() is None:
            self.proc.kill()
        if self._loop_reader is not None:
            self._loop_reader.detach()
        self.channel.close()
        self._finalizer()
        REGISTRY.drop_owner(self.metrics_owner)
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=5)
