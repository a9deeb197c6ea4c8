"""A Python-backend instance whose model runs in its own stub process (the default).

As with Triton's stubs, ``instance_group { count: 2 }`` gives two processes, so CPU-bound
models really use two cores, and a model that crashes (segfault, ``os._exit``, killed) fails
only the requests it had in flight, with Triton's "Stub process '<instance>' is not healthy."
The stub is then started again in the background (``initialize`` runs again) and later requests
wait for it, while the server and the other models carry on. ``close`` never waits on the
child without a bound: ``finalize`` gets ``finalize_timeout_s`` (tritonserver waits for it
without one), then the child is killed; while the server exits, every wait also ends at its
exit deadline (``launch.exit_deadline``, docs/shutdown-facts.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence

from workbench import threads
from workbench.backends.base import ExecRequest, ExecResult, fail_all
from workbench.backends.python._server_stub import (
    StubGone,
    StubLaunch,
    StubProcess,
    unhealthy,
)
from workbench.backends.python._wire_channel import ChannelClosed
from workbench.errors import UnavailableError, WorkbenchError

_log = logging.getLogger(__name__)

#: BLS calls served at once for one instance (``async_exec`` may issue several together)
_BLS_THREADS = 8


class ProcessModelInstance:
    """One python model instance served by a stub process (a ``ModelInstance``)."""

    #: how long ``close`` lets the model's ``finalize`` run before killing the stub
    finalize_timeout_s = 30.0
    #: how long ``close`` waits for the stub to exit after ``finalize``
    exit_timeout_s = 5.0

    def __init__(self, launch: StubLaunch) -> None:
        self.launch = launch
        self._lock = threading.Lock()
        self._stub: StubProcess | None = None
        #: a stub being started (``close`` kills it so that nothing waits on it)
        self._starting: StubProcess | None = None
        self._restart: threading.Thread | None = None
        self._closing = False
        self._bls_pool = threads.worker_pool(f"{launch.instance_name}-bls", _BLS_THREADS)

    @property
    def pid(self) -> int | None:
        """The process id of the current stub (None while there is none)."""
        stub = self._stub
        return stub.pid if stub is not None else None

    def start(self) -> None:
        """Start the first stub and initialize the model; failures raise."""
        self._stub = self._spawn()

    def _spawn(self) -> StubProcess:
        if self._closing:
            raise UnavailableError(f"model instance '{self.launch.instance_name}' is closing")
        stub = StubProcess(self.launch, self._bls_pool, on_death=self._died)
        with self._lock:
            closing = self._closing
            self._starting = stub
        try:
            if closing:  # close() ran while we started it
                raise UnavailableError(f"model instance '{self.launch.instance_name}' is closing")
            stub.initialize()
        except BaseException:
            stub.kill()
            raise
        finally:
            with self._lock:
                self._starting = None
        return stub

    # -- execution -----------------------------------------------------------------------------
    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Run ``requests`` in the stub; a stub that dies meanwhile fails only these."""
        for _attempt in range(2):
            try:
                stub = self._healthy_stub()
            except WorkbenchError as exc:
                return self._fail(requests, exc)
            try:
                return stub.execute(requests)
            except StubGone:  # it died while idle: restart it and send the requests again
                self._died(stub)
            except ChannelClosed:
                self._died(stub)
                break
        return self._fail(requests, unhealthy(self.launch.instance_name))

    async def execute_async(self, requests: Sequence[ExecRequest]) -> list[ExecResult] | None:
        """``execute``, awaited on the server's event loop instead of run on a worker thread.

        Part of ``LoopModelInstance``: a core that awaits it saves the two thread hand-offs
        of every call, because the loop sends the call and reads the reply itself.
        None for decoupled models and a stub being restarted: those go through ``execute``
        on the instance's thread (the core's).
        """
        loop = asyncio.get_running_loop()
        for _attempt in range(2):
            stub = self._loop_stub()
            if stub is None:
                return None
            try:
                return await stub.execute_async(requests, loop)
            except StubGone:  # it died while idle: restart it and send the requests again
                self._died(stub)
            except ChannelClosed:
                self._died(stub)
                break
        return self._fail(requests, unhealthy(self.launch.instance_name))

    def start_execute(
        self, requests: Sequence[ExecRequest], on_done: Callable[[list[ExecResult]], None]
    ) -> bool:
        """Send ``requests`` to the stub now, from the loop; ``on_done(results)`` runs on the
        loop as soon as the reply is read (a stub dying meanwhile fails only these).

        Tried before ``execute_async`` (``LoopModelInstance``), and cheaper: no task and no
        future per call. False when this path cannot take the call (a stub starting, a
        decoupled model, a channel read by a thread, a stub found dead): nothing was sent,
        use ``execute_async``.
        """
        stub = self._loop_stub()
        if stub is None:
            return False

        def finished(results: list[ExecResult] | None, error: BaseException | None) -> None:
            if results is None:  # ChannelClosed: it died with these requests in flight
                try:
                    self._died(stub)
                except Exception:  # the requests still get their answer below
                    _log.exception("handling the death of stub %d failed", stub.pid)
                results = self._fail(requests, unhealthy(self.launch.instance_name))
            on_done(results)

        try:
            return stub.start_execute(requests, asyncio.get_running_loop(), finished)
        except StubGone:  # it died while idle; execute_async restarts it and sends again
            self._died(stub)
            return False

    def _loop_stub(self) -> StubProcess | None:
        """The stub the loop may call now; None while it (re)starts, when closing, and for
        decoupled models (those take ``execute`` on a thread)."""
        stub, restart = self._stub, self._restart
        restarting = restart is not None and restart.is_alive()
        if stub is None or restarting or self._closing or self.launch.spec.decoupled:
            return None
        return stub

    def _fail(self, requests: Sequence[ExecRequest], error: WorkbenchError) -> list[ExecResult]:
        if not self.launch.spec.decoupled:
            return fail_all(len(requests), error)
        for request in requests:  # a decoupled request's error goes through its stream
            if request.respond is not None:
                request.respond(ExecResult(error=error), True)
        return [ExecResult() for _ in requests]

    def _healthy_stub(self) -> StubProcess:
        """The current stub, once a restart under way finished (or a new one if it failed)."""
        restart = self._restart
        if restart is not None:
            restart.join()
        with self._lock:
            if self._closing:
                raise UnavailableError(f"model instance '{self.launch.instance_name}' is closing")
            stub = self._stub
        if stub is not None:
            return stub
        # The background restart failed: try once more, for these requests.
        stub = self._spawn()
        with self._lock:
            self._stub = stub
        return stub

    # -- a dead stub ---------------------------------------------------------------------------
    def _died(self, stub: StubProcess) -> None:
        """Handle the death of ``stub`` once: fail its open streams, restart in background."""
        with self._lock:
            if stub is not self._stub or self._closing or stub.abandoned:
                return
            self._stub = None
            # started under the lock: whoever sees it may join it
            self._restart = threads.start(
                f"{self.launch.instance_name}-restart", self._restart_stub
            )
        stub.fail_open(unhealthy(self.launch.instance_name))
        how = stub.exit_description(wait_s=1.0)
        stub.kill()
        _log.error(
            "stub process '%s' (pid %d) %s. Stub process is unhealthy and it will be restarted.",
            self.launch.instance_name,
            stub.pid,
            how,
        )

    def _restart_stub(self) -> None:
        try:
            stub = self._spawn()
        except WorkbenchError as exc:
            if not self._closing:
                _log.error("Failed to restart the stub process: %s", exc)
            return
        with self._lock:
            if not self._closing:
                self._stub = stub
                return
        stub.kill()

    # -- closing -------------------------------------------------------------------------------
    def close(self) -> None:
        """``finalize`` in the stub, then stop it; every wait is bounded, then it is killed.

        Safe to call from another thread while ``execute`` is stuck: the stuck call then
        fails with the "not healthy" error.
        """
        with self._lock:
            self._closing = True
            stub, starting, restart = self._stub, self._starting, self._restart
            self._stub = None
        if starting is not None:
            starting.kill()
        if restart is not None:
            restart.join(timeout=self.launch.exit_deadline.remaining(self.exit_timeout_s))
        if stub is not None:
            stub.shutdown(self.finalize_timeout_s, self.exit_timeout_s)
            stub.fail_open(UnavailableError(f"model instance '{self.launch.instance_name}' closed"))
        self._bls_pool.shutdown(wait=False, cancel_futures=True)
