"""Model instances and the workers they execute on.

This is the one module that owns threads for model execution. Each instance gets its own
single-thread worker, so an instance never runs two batches at once (as in Triton) and
``count: N`` means N batches in flight. Backends that release the GIL (onnxruntime, torch)
run truly in parallel; python models run in-process for now (see docs/architecture notes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from workbench.backends.base import Backend, InstanceContext, ModelInstance

T = TypeVar("T")


@dataclass(slots=True)
class _Worker:
    name: str
    executor: ThreadPoolExecutor
    instance: ModelInstance | None = None


class InstancePool:
    """The instances of one model version, handed out one request batch at a time."""

    def __init__(self, contexts: Sequence[InstanceContext]) -> None:
        self._contexts = list(contexts)
        self._workers = [
            _Worker(ctx.instance_name, ThreadPoolExecutor(1, thread_name_prefix=ctx.instance_name))
            for ctx in self._contexts
        ]
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()

    def __len__(self) -> int:
        return len(self._workers)

    async def create(self, backend: Backend) -> None:
        """Create every instance on its own worker thread; on failure close what was made."""
        loop = asyncio.get_running_loop()
        jobs = [
            loop.run_in_executor(worker.executor, backend.create_instance, ctx)
            for worker, ctx in zip(self._workers, self._contexts, strict=True)
        ]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for worker, result in zip(self._workers, results, strict=True):
            if not isinstance(result, BaseException):
                worker.instance = result
                self._idle.put_nowait(worker)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.close()
            raise errors[0]

    async def run(self, job: Callable[[ModelInstance], T]) -> T:
        """Wait for an idle instance and run ``job`` with it on that instance's worker."""
        worker = await self._idle.get()
        try:
            assert worker.instance is not None
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(worker.executor, job, worker.instance)
        finally:
            self._idle.put_nowait(worker)

    async def close(self) -> None:
        """Finalize every created instance on its worker, then stop the workers."""
        loop = asyncio.get_running_loop()
        for worker in self._workers:
            if worker.instance is not None:
                try:
                    await loop.run_in_executor(worker.executor, worker.instance.close)
                except Exception:  # user code in finalize() must not stop the others closing
                    pass
                worker.instance = None
            worker.executor.shutdown(wait=False)
