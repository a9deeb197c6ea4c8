"""Ensemble execution: a DAG of composing models, each step started as soon as its inputs exist.

Independent branches run concurrently (one task per ready step). A step's failure cancels the
rest and is reported with the step index and composing model name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.core.checks import RequestChecker
from workbench.core.model import InFlight, ServingModel, select_outputs
from workbench.core.request import InferRequest, InferResponse
from workbench.core.statistics import ModelStatistics, RequestTimes
from workbench.errors import InternalError, WorkbenchError

#: (model name, version string) -> the serving version; raises like the server does
Resolver = Callable[[str, str], ServingModel]


def composing_models(config: ModelConfig) -> list[str]:
    """Names of the models an ensemble's steps call, in step order, without repeats."""
    names = [step.model_name for step in config.ensemble_scheduling.step]
    return list(dict.fromkeys(names))


class EnsembleModel:
    """A version of a ``platform: "ensemble"`` model."""

    def __init__(self, config: ModelConfig, version: int, resolve: Resolver) -> None:
        self.name = config.name
        self.version = version
        self.config = config
        self.stats = ModelStatistics(config.name, version)
        self._steps = list(config.ensemble_scheduling.step)
        self._resolve = resolve
        self._checker = RequestChecker(config)
        self._inflight = InFlight()

    async def infer(self, request: InferRequest) -> InferResponse:
        batch = self._checker.check(request)
        times = RequestTimes()
        times.started = times.input_done = time.monotonic_ns()
        with self._inflight:
            try:
                tensors = await self._run_graph(dict(request.inputs), request)
            except WorkbenchError:
                self.stats.record_failure(times)
                raise
        times.infer_done = times.output_done = time.monotonic_ns()
        outputs = [
            Tensor(o.name, tensors[o.name].datatype, tensors[o.name].array)
            for o in self.config.output
        ]
        self.stats.record_execution(batch, times)
        self.stats.record_success(batch, times)
        return InferResponse(
            model_name=self.name,
            model_version=str(self.version),
            id=request.id,
            outputs=select_outputs(outputs, request.requested_outputs),
        )

    async def _run_graph(
        self, tensors: dict[str, Tensor], request: InferRequest
    ) -> dict[str, Tensor]:
        waiting = list(range(len(self._steps)))
        running: dict[asyncio.Task[InferResponse], int] = {}
        try:
            while waiting or running:
                for index in [i for i in waiting if self._ready(i, tensors)]:
                    waiting.remove(index)
                    task = asyncio.ensure_future(self._run_step(index, tensors, request))
                    running[task] = index
                if not running:
                    raise InternalError(self._stuck_message(waiting))
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._collect(running.pop(task), task.result(), tensors)
        finally:
            for task in running:
                task.cancel()
        return tensors

    def _ready(self, index: int, tensors: dict[str, Tensor]) -> bool:
        return all(name in tensors for name in self._steps[index].input_map.values())

    async def _run_step(
        self, index: int, tensors: dict[str, Tensor], parent: InferRequest
    ) -> InferResponse:
        step = self._steps[index]
        inputs = {
            model_input: Tensor(model_input, tensors[name].datatype, tensors[name].array)
            for model_input, name in step.input_map.items()
        }
        version = "" if step.model_version < 0 else str(step.model_version)
        request = InferRequest(
            model_name=step.model_name,
            model_version=version,
            id=parent.id,
            inputs=inputs,
            requested_outputs=list(step.output_map.keys()),
            parameters=parent.parameters,
        )
        try:
            return await self._resolve(step.model_name, version).infer(request)
        except WorkbenchError as exc:
            raise type(exc)(
                f"in ensemble '{self.name}', step {index} (model '{step.model_name}'): {exc}"
            ) from exc

    def _collect(self, index: int, response: InferResponse, tensors: dict[str, Tensor]) -> None:
        output_map = self._steps[index].output_map
        for tensor in response.outputs:
            name = output_map[tensor.name]
            tensors[name] = Tensor(name, tensor.datatype, tensor.array)

    def _stuck_message(self, waiting: list[int]) -> str:
        steps = ", ".join(f"{i} ('{self._steps[i].model_name}')" for i in waiting)
        return f"ensemble '{self.name}': steps {steps} can never run, their inputs are not produced"

    async def drain(self) -> None:
        await self._inflight.wait_idle()

    async def close(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"composing_models": composing_models(self.config)}
