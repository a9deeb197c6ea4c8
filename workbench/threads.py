"""Every thread this package starts, from this one module: named, and bounded per kind of work.

Nothing else in ``workbench`` creates a ``threading.Thread`` or a ``ThreadPoolExecutor``, or
hands blocking work to an event loop's default executor (``asyncio.to_thread``,
``run_in_executor(None, ...)``); ``tests/test_threads.py`` checks that in the source and that a
serving server runs no thread of ours this module does not know. The kinds of blocking work:

=====================================  ==========================================  ==========
work                                   where it runs                               bound
=====================================  ==========================================  ==========
a model instance's executions          ``instance_worker(name)``: its own thread   1 each
  (onnxruntime, torch, tensorrt; a       (an instance runs one batch at a time, as
  python stub not driven from the loop)  in Triton), made by ``core/instances.py``
BLS calls a stub makes                 ``worker_pool(name, n)`` per instance        n
repository reads and writes            ``Work.FILES``                              4
  (snapshots, configs, refresh)
closing model instances                ``Work.CLOSE``                              8
  (``finalize``, a stub's exit; the
  native gRPC server's stop)
metrics sampling (GPU, processes)      ``Work.SAMPLE``                             1
child servers (start, wait, stop)      ``Work.PROCESS``                            4
sweeps run for Jupyter's handlers      ``Work.SWEEP``                              2
a stub's ``async_exec`` calls          ``Work.BLS``                                16
long-lived service threads             ``start(name, target)``: one each, daemon   one each
  (the server's loop, stub readers,
  restarts, in-process model loops,
  shared-memory release, metric flush,
  a sweep's loop)
=====================================  ==========================================  ==========

Not Python threads, so not made here: those of gRPC's C++ core under the native gRPC front
end (``server/grpc/_native.cpp``: its completion-queue and sender threads, and gRPC's own).

The shared pools (``Work``) are made on first use, one per kind per process, so several
servers in one process share them; their threads are named ``workbench-<kind>_<n>``.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class Work(enum.Enum):
    """A kind of blocking work with its shared, bounded pool: (thread name prefix, threads)."""

    FILES = ("workbench-files", 4)
    CLOSE = ("workbench-close", 8)
    SAMPLE = ("workbench-sample", 1)
    PROCESS = ("workbench-process", 4)
    SWEEP = ("workbench-sweep", 2)
    BLS = ("workbench-bls", 16)

    @property
    def prefix(self) -> str:
        return str(self.value[0])

    @property
    def threads(self) -> int:
        return int(self.value[1])


_lock = threading.Lock()
_shared: dict[Work, ThreadPoolExecutor] = {}
#: name prefixes of every pool made here (shared or per instance), for ``owns``
_prefixes: set[str] = {work.prefix for work in Work}
#: every service thread ``start`` made that may still run
_started: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def pool(work: Work) -> ThreadPoolExecutor:
    """The process-wide pool for ``work`` (made on first use)."""
    executor = _shared.get(work)
    if executor is None:
        with _lock:
            executor = _shared.get(work)
            if executor is None:
                executor = ThreadPoolExecutor(work.threads, thread_name_prefix=work.prefix)
                _shared[work] = executor
    return executor


async def run(work: Work, func: Callable[..., T], *args: Any) -> T:
    """``func(*args)`` on ``work``'s pool, awaited (the caller's context variables go along)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(pool(work), context.run, func, *args)


def instance_worker(name: str) -> ThreadPoolExecutor:
    """The one thread of a model instance: its executions run there, one at a time."""
    return worker_pool(name, 1)


def worker_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """A pool of its own for one owner (e.g. a stub's BLS calls), ``threads`` at most."""
    with _lock:
        _prefixes.add(name)
    return ThreadPoolExecutor(threads, thread_name_prefix=name)


def start(
    name: str, target: Callable[..., object], *args: Any, daemon: bool = True
) -> threading.Thread:
    """Start a long-lived service thread ``name`` running ``target(*args)``."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=daemon)
    with _lock:
        _started.add(thread)
    thread.start()
    return thread


def owns(thread: threading.Thread) -> bool:
    """Whether ``thread`` was started by this module (a service thread or a pool's)."""
    with _lock:
        if thread in _started:
            return True
        prefixes = tuple(f"{prefix}_" for prefix in _prefixes)
    return thread.name.startswith(prefixes)
