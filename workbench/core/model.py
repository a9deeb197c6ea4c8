"""A loaded model version: checks requests, runs them on its instances, keeps statistics."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.backends.base import ExecResult, ModelInstance
from workbench.config.dtypes import config_to_wire
from workbench.core.checks import RequestChecker, reshape_inputs, reshape_outputs
from workbench.core.instances import InstancePool
from workbench.core.request import InferRequest, InferResponse
from workbench.core.statistics import ModelStatistics, RequestTimes
from workbench.errors import InternalError, WorkbenchError


class ServingModel(Protocol):
    """What the lifecycle manager holds for each READY version."""

    name: str
    version: int
    config: ModelConfig
    stats: ModelStatistics

    async def infer(self, request: InferRequest) -> InferResponse: ...

    async def drain(self) -> None: ...

    async def close(self) -> None: ...


class InFlight:
    """Counts requests in flight so that an unload or reload can wait for them."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def __enter__(self) -> InFlight:
        self.count += 1
        self._idle.clear()
        return self

    def __exit__(self, *exc: object) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()


def model_metadata(config: ModelConfig, versions: list[int]) -> dict[str, Any]:
    """Triton's model metadata JSON for a config (shapes include -1 for the batch dim)."""
    lead = [-1] if config.max_batch_size > 0 else []

    def io(spec: Any) -> dict[str, Any]:
        return {
            "name": spec.name,
            "datatype": config_to_wire(spec.data_type),
            "shape": lead + list(spec.dims),
        }

    return {
        "name": config.name,
        "versions": [str(v) for v in versions],
        "platform": config.platform or config.backend,
        "inputs": [io(i) for i in config.input],
        "outputs": [io(o) for o in config.output],
    }


class BackendModel:
    """A version served by a backend through its instance pool."""

    def __init__(self, config: ModelConfig, version: int, pool: InstancePool) -> None:
        self.name = config.name
        self.version = version
        self.config = config
        self.pool = pool
        self.stats = ModelStatistics(config.name, version)
        self._checker = RequestChecker(config)
        self._batched = config.max_batch_size > 0
        self._inflight = InFlight()

    async def infer(self, request: InferRequest) -> InferResponse:
        batch = self._checker.check(request)
        times = RequestTimes()
        with self._inflight:
            try:
                result = await self.pool.run(lambda instance: self._run(instance, request, times))
            except WorkbenchError:
                self.stats.record_failure(times)
                raise
        if result.error is not None:
            self.stats.record_failure(times)
            raise result.error
        self.stats.record_execution(batch, times)
        self.stats.record_success(batch, times)
        return InferResponse(
            model_name=self.name,
            model_version=str(self.version),
            id=request.id,
            outputs=result.outputs,
            parameters=result.parameters,
        )

    def _run(
        self, instance: ModelInstance, request: InferRequest, times: RequestTimes
    ) -> ExecResult:
        """Runs on the instance's worker thread."""
        times.started = time.monotonic_ns()
        reshape_inputs(self.config, request, self._batched)
        times.input_done = time.monotonic_ns()
        try:
            results = instance.execute([request])
        except WorkbenchError as exc:
            results = [ExecResult(error=exc)]
        except Exception as exc:  # a bug in user model code fails the request, not the server
            results = [ExecResult(error=InternalError(f"{type(exc).__name__}: {exc}"))]
        times.infer_done = time.monotonic_ns()
        if len(results) != 1:
            return ExecResult(
                error=InternalError(
                    f"model '{self.name}' returned {len(results)} responses for 1 request"
                )
            )
        result = results[0]
        if result.error is None:
            result.outputs = select_outputs(result.outputs, request.requested_outputs)
            reshape_outputs(self.config, result.outputs, self._batched)
        times.output_done = time.monotonic_ns()
        return result

    async def drain(self) -> None:
        await self._inflight.wait_idle()

    async def close(self) -> None:
        await self.pool.close()


def select_outputs(outputs: list[Tensor], requested: list[str] | None) -> list[Tensor]:
    """Keep the requested outputs, in the order they were asked for."""
    if requested is None:
        return outputs
    by_name = {t.name: t for t in outputs}
    missing = [name for name in requested if name not in by_name]
    if missing:
        raise InternalError(f"model did not produce requested output(s) {missing}")
    return [by_name[name] for name in requested]
