"""A closed-loop async load generator over Triton's public HTTP or gRPC API.

``concurrency`` workers each send a request, wait for its answer and send the next one, for
``duration_s`` (perf_analyzer's concurrency mode). Failed requests are counted with their
message and the loop goes on, so one bad point never ends a sweep. The requests are encoded
once, as perf_analyzer does, and sent as Triton's public HTTP and gRPC APIs take them
(``senders``), so the same code drives real Triton.
A sweep runs it in a worker process (``load_process``), away from the server's GIL.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.bench.host_cpu import CpuTimes, busy_fraction
from workbench.bench.senders import GrpcSender, HttpSender, InferCall, model_infer_request
from workbench.errors import InvalidArgumentError

PROTOCOLS = ("http", "grpc")
PERCENTILES = (50, 90, 95, 99)

Send = Callable[[], Awaitable[Any]]


@dataclass
class LoadResult:
    """What the client saw during one closed-loop run."""

    concurrency: int
    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str = ""
    elapsed_s: float = 0.0
    #: how busy this machine's CPUs were over exactly that time (``host_cpu``; NaN unread)
    host_cpu: float = math.nan

    @property
    def throughput(self) -> float:
        """Successful inferences per second."""
        return len(self.latencies_s) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def percentiles_ms(self) -> dict[str, float]:
        """``p50_ms`` ... ``p99_ms`` and ``avg_ms`` of the successful requests (NaN if none)."""
        if not self.latencies_s:
            return {f"p{p}_ms": float("nan") for p in PERCENTILES} | {"avg_ms": float("nan")}
        values = np.asarray(self.latencies_s) * 1000.0
        found = {f"p{p}_ms": float(np.percentile(values, p)) for p in PERCENTILES}
        return found | {"avg_ms": float(values.mean())}


async def closed_loop(
    send: Send,
    concurrency: int,
    duration_s: float,
    stop: threading.Event | None = None,
) -> LoadResult:
    """Run ``concurrency`` workers calling ``send()`` back to back for ``duration_s``.

    Requests already sent when time is up are waited for and counted, so the server-side
    statistics read afterwards cover exactly the requests measured here.
    """
    result = LoadResult(concurrency)
    clock = time.perf_counter
    deadline = clock() + duration_s

    def going() -> bool:
        return clock() < deadline and not (stop is not None and stop.is_set())

    async def worker() -> None:
        while going():
            started = clock()
            try:
                await send()
            except Exception as exc:  # any failure is recorded and the load goes on
                result.errors += 1
                result.first_error = result.first_error or error_text(exc)
                await asyncio.sleep(0)  # a server refusing at once must not starve the loop
                continue
            result.latencies_s.append(clock() - started)

    began, cpu = clock(), CpuTimes.read()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.elapsed_s = clock() - began
    result.host_cpu = busy_fraction(cpu, CpuTimes.read())
    return result


def error_text(exc: BaseException) -> str:
    """An exception's message as tritonclient and Triton word it (its type when empty)."""
    message = getattr(exc, "message", None)
    text = message() if callable(message) else str(exc)
    return text or type(exc).__name__


class InferSender:
    """One model's request, encoded once and sent again and again over one protocol
    (``senders``: what tritonclient would send, without its per-request CPU)."""

    def __init__(self, protocol: str, url: str, call: InferCall) -> None:
        if protocol not in PROTOCOLS:
            raise InvalidArgumentError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        self.call = call
        self._sender: HttpSender | GrpcSender
        if protocol == "http":
            import tritonclient.http as http

            inputs = []
            for name, array in call.wire_arrays().items():
                tensor = http.InferInput(name, list(array.shape), call.datatypes[name])
                tensor.set_data_from_numpy(array, binary_data=True)
                inputs.append(tensor)
            requested = [http.InferRequestedOutput(o, binary_data=True) for o in call.outputs]
            self._sender = HttpSender(url, call.model, inputs, requested, call.version)
        else:
            self._sender = GrpcSender(url, model_infer_request(call))

    async def __call__(self) -> None:
        await self._sender()

    async def close(self) -> None:
        await self._sender.close()


__all__ = ["PERCENTILES", "PROTOCOLS", "InferSender", "LoadResult", "closed_loop", "error_text"]
