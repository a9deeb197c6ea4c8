"""Ensemble execution: a DAG of composing models, each step started as soon as its inputs exist.

Behaves as Triton 2.51's ensemble scheduler (core ``src/ensemble_scheduler``), as observed:

- Steps whose inputs are all available start at once, so independent branches run
  concurrently; one tensor may feed several steps. ``model_version: -1`` is the latest ready
  version; every composing version is resolved when the request starts, so one request sees
  one set of versions even across a reload.
- The batch dimension passes through. Between a batching and a non-batching model a tensor of
  batch size 1 loses, or gains, its leading 1 (Triton's ``ReshapeTensorDims``).
- A failing step stops new steps from starting; the steps already running finish (Triton
  answers once nothing is in flight). The error keeps the step error's category (so its HTTP
  status) and reads ``in ensemble '<name>', <the step's error> (step <i>, model '<model>')``:
  Triton's text, then the step that failed.
- A request that names some ``outputs`` skips steps as Triton does, quirks included (see
  ``triton_pruned_steps``); when that leaves an output unwritten the request fails with
  Triton's "unexpected deadlock" error, followed by what to request instead.
- Responses carry Triton's ``sequence_id``/``sequence_start``/``sequence_end`` parameters and
  list outputs in Triton's order (``triton_output_order``), whatever order the request asked.
- Tracing: the steps of a traced request are traced as its children (``parent_id``), as
  Triton's ensemble scheduler spawns child traces; the ensemble's own trace has no COMPUTE_*.
- Statistics: each composing model counts its own requests. The ensemble counts one execution
  and one success per request, and its ``compute_infer`` is the time spent in steps, summed
  over steps. A failed request adds 2 to ``fail``: Triton 2.51 records it when the request
  ends and again when it sends the error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelEnsembling

from workbench._types import Parameters, Tensor
from workbench.core.model import InFlight, ServingModel
from workbench.core.request import InferRequest, InferResponse
from workbench.core.request_checks import RequestChecker, reshape_inputs
from workbench.core.statistics import ModelStatistics, RequestTimes
from workbench.errors import InternalError, InvalidArgumentError, WorkbenchError

#: (model name, version string; "" = latest) -> the serving version; raises like the server
Resolver = Callable[[str, str], ServingModel]

_SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")


def composing_models(config: ModelConfig) -> list[str]:
    """Names of the models an ensemble's steps call, in step order, without repeats."""
    names = [step.model_name for step in config.ensemble_scheduling.step]
    return list(dict.fromkeys(names))


def step_version(step: ModelEnsembling.Step) -> str:
    """The version a step asks for, as a request names it ("" = the latest)."""
    return "" if step.model_version < 0 else str(step.model_version)


def fit_batch(dims: Sequence[int], batching: bool, batch: int, shape: Sequence[int]) -> list[int]:
    """The shape a tensor takes when it enters a model (or leaves the ensemble).

    ``dims`` and ``batching`` describe the receiving side, ``batch`` the batch size the tensor
    carries (0: produced without batching). Only a mismatch in batching changes anything: a
    tensor matching ``dims`` gains a leading 1 for a batching receiver, and a batch-1 tensor
    not matching ``dims`` loses its leading 1 for a non-batching receiver.
    """
    if batching == (batch != 0):
        return list(shape)
    if batching:
        return [1, *shape] if _matches(shape, dims) else list(shape)
    if batch == 1 and not _matches(shape, dims):
        return list(shape[1:])
    return list(shape)


def _matches(shape: Sequence[int], dims: Sequence[int]) -> bool:
    return len(shape) == len(dims) and all(
        d == -1 or d == s for s, d in zip(shape, dims, strict=True)
    )


@dataclass(slots=True)
class _Value:
    """An ensemble tensor within one request.

    ``tensor`` is None for an optional input the request left out (or an output a step did
    not produce): steps then run without it. ``batch`` is the batch size it carries, 0 when
    produced without batching.
    """

    tensor: Tensor | None
    batch: int


@dataclass(slots=True)
class _Run:
    """One ensemble request on its way through the graph."""

    request: InferRequest
    #: step index -> the composing version it runs on (steps this request runs)
    models: dict[int, ServingModel]
    values: dict[str, _Value]
    parameters: Parameters
    waiting: list[int] = field(default_factory=list)
    #: step index -> the batch size of the request it sent (0: a non-batching model)
    batches: dict[int, int] = field(default_factory=dict)
    #: nanoseconds spent in steps, summed over steps
    step_ns: int = 0
    failure: WorkbenchError | None = None


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
        self._batched = config.max_batch_size > 0
        self._optional = {tensor.name for tensor in config.input if tensor.optional}
        dims = {
            o.name: list(o.reshape.shape if o.HasField("reshape") else o.dims)
            for o in config.output
        }
        self._output_dims = {name: dims[name] for name in triton_output_order(list(dims))}
        self._inflight = InFlight()

    async def infer(self, request: InferRequest) -> InferResponse:
        batch = self._checker.check(request)
        times = RequestTimes()
        with self._inflight:
            try:
                response = await self._execute(request, batch, times)
            except WorkbenchError:
                # Triton 2.51 records a failed ensemble request twice (see the module doc).
                self.stats.record_failure(times)
                self.stats.record_failure(times)
                self._report_trace(request, times)
                raise
        self.stats.record_execution(batch, times)
        self.stats.record_success(batch, times)
        self._report_trace(request, times, response.outputs)
        return response

    def _report_trace(
        self, request: InferRequest, times: RequestTimes, outputs: Sequence[Tensor] = ()
    ) -> None:
        """A traced request's timestamps: an ensemble has no COMPUTE_* of its own (its steps'
        requests are traced as its children)."""
        if request.trace is not None:
            request.trace.report_request(
                self.name,
                self.version,
                request.id,
                times,
                compute=False,
                inputs=request.inputs.values(),
                outputs=outputs,
            )

    async def _execute(
        self, request: InferRequest, batch: int, times: RequestTimes
    ) -> InferResponse:
        """Run the graph; stamp ``times`` with the phases Triton reports for an ensemble."""
        times.started = time.monotonic_ns()
        run = self._start(request, batch)
        times.input_done = time.monotonic_ns()
        await self._run_graph(run)
        graph_done = time.monotonic_ns()
        outputs = self._outputs(run, batch)
        # compute_infer is the time spent in steps, summed over steps (not the wall time).
        times.infer_done = times.input_done + run.step_ns
        times.output_done = times.infer_done + time.monotonic_ns() - graph_done
        return InferResponse(
            model_name=self.name,
            model_version=str(self.version),
            id=request.id,
            outputs=outputs,
            parameters=run.parameters,
        )

    # -- preparing a request -------------------------------------------------------------------
    def _start(self, request: InferRequest, batch: int) -> _Run:
        """Choose the steps, resolve their models, and make the ensemble inputs available."""
        steps = set(range(len(self._steps)))
        if request.requested_outputs is not None:
            steps -= triton_pruned_steps(self.config, request.requested_outputs)
        models = {index: self._model_for(index) for index in sorted(steps)}
        reshape_inputs(self.config, request, self._batched)
        carried = batch if self._batched else 0
        values = {name: _Value(tensor, carried) for name, tensor in request.inputs.items()}
        for name in self._optional - values.keys():
            values[name] = _Value(None, carried)
        run = _Run(request, models, values, _sequence_parameters(request.parameters))
        run.waiting = sorted(steps)
        return run

    def _model_for(self, index: int) -> ServingModel:
        step = self._steps[index]
        try:
            return self._resolve(step.model_name, step_version(step))
        except WorkbenchError as exc:
            raise self._step_error(index, exc) from exc

    # -- running the graph ---------------------------------------------------------------------
    async def _run_graph(self, run: _Run) -> None:
        running: dict[asyncio.Task[InferResponse], int] = {}
        try:
            while True:  # every pass starts or finishes a step, and there are finitely many
                if run.failure is None:
                    self._start_ready(run, running)
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    self._finish(run, running.pop(task), task)
        finally:
            for task in running:
                task.cancel()
        if run.failure is not None:
            raise run.failure
        self._require_outputs(run)

    def _start_ready(self, run: _Run, running: dict[asyncio.Task[InferResponse], int]) -> None:
        for index in [i for i in run.waiting if self._ready(i, run.values)]:
            run.waiting.remove(index)
            running[asyncio.ensure_future(self._run_step(index, run))] = index

    def _ready(self, index: int, values: dict[str, _Value]) -> bool:
        return all(name in values for name in self._steps[index].input_map.values())

    def _finish(self, run: _Run, index: int, task: asyncio.Task[InferResponse]) -> None:
        error = task.exception()
        if error is None:
            self._collect(index, run, task.result())
        elif not isinstance(error, WorkbenchError):
            raise error
        elif run.failure is None:
            run.failure = error

    async def _run_step(self, index: int, run: _Run) -> InferResponse:
        step = self._steps[index]
        model = run.models[index]
        inputs = self._step_inputs(index, model.config, run.values)
        if model.config.max_batch_size > 0:
            run.batches[index] = next((t.shape[0] for t in inputs.values() if t.shape), 1)
        trace = run.request.trace
        request = InferRequest(
            model_name=step.model_name,
            model_version=str(model.version),
            id=run.request.id,
            inputs=inputs,
            requested_outputs=list(step.output_map.keys()),
            parameters=dict(run.request.parameters),
            trace=None if trace is None else trace.spawn(),
        )
        started = time.monotonic_ns()
        try:
            return await model.infer(request)
        except WorkbenchError as exc:
            raise self._step_error(index, exc) from exc
        finally:
            run.step_ns += time.monotonic_ns() - started

    def _step_inputs(
        self, index: int, config: ModelConfig, values: dict[str, _Value]
    ) -> dict[str, Tensor]:
        """The step's inputs, their batch dimension fitted to the composing model."""
        batching = config.max_batch_size > 0
        dims = {spec.name: list(spec.dims) for spec in config.input}
        inputs = {}
        for model_input, name in self._steps[index].input_map.items():
            value = values[name]
            if value.tensor is not None:
                inputs[model_input] = _fitted(
                    value, model_input, dims.get(model_input, []), batching
                )
        return inputs

    def _collect(self, index: int, run: _Run, response: InferResponse) -> None:
        """Make a finished step's outputs available, with the batch size they carry."""
        batch = run.batches.get(index, 0)
        produced = {t.name: t for t in response.outputs}
        for output, name in self._steps[index].output_map.items():
            tensor = produced.get(output)
            data = None if tensor is None else Tensor(name, tensor.datatype, tensor.array)
            run.values[name] = _Value(data, batch)
        for key in _SEQUENCE_PARAMETERS:
            if key in response.parameters:
                run.parameters[key] = response.parameters[key]

    def _outputs_of(self, run: _Run) -> list[str]:
        """The outputs this request asked for (all when it named none), in Triton's order."""
        requested = run.request.requested_outputs
        return [n for n in self._output_dims if requested is None or n in requested]

    def _require_outputs(self, run: _Run) -> None:
        """Fail as Triton does when no step can run and a requested output is missing."""
        missing = [name for name in self._outputs_of(run) if name not in run.values]
        if not missing:
            return
        request_id = run.request.id or "<id_unknown>"
        message = (
            f"in ensemble '{self.name}', [request id: {request_id}] unexpected deadlock, at "
            "least one output is not set while no more ensemble steps can be made"
        )
        if run.request.requested_outputs is not None:
            skipped = ", ".join(
                _label(i, self._steps[i]) for i in range(len(self._steps)) if i not in run.models
            )
            raise InvalidArgumentError(
                f"{message}; {', '.join(repr(n) for n in missing)} never written: for the "
                f"requested outputs Triton 2.51 skips {skipped}; leave 'outputs' out of the "
                "request (all outputs) or also request the outputs those steps write"
            )
        waiting = ", ".join(_label(i, self._steps[i]) for i in run.waiting)
        raise InternalError(f"{message}; {waiting} never received all their inputs")

    def _outputs(self, run: _Run, batch: int) -> list[Tensor]:
        """The requested ensemble outputs, batch dimension fitted, in Triton's order."""
        carried = batch if self._batched else 0
        outputs = []
        for name in self._outputs_of(run):
            value = run.values.get(name)
            if value is not None and value.tensor is not None:
                outputs.append(_fitted(value, name, self._output_dims[name], carried != 0))
        return outputs

    def _step_error(self, index: int, exc: WorkbenchError) -> WorkbenchError:
        """The step's error, same category, as Triton words it, then the step that failed."""
        step = self._steps[index]
        message = f"in ensemble '{self.name}', {exc} (step {index}, model '{step.model_name}')"
        # Same class without calling its constructor (some categories take other arguments).
        wrapped = WorkbenchError.__new__(type(exc))
        WorkbenchError.__init__(wrapped, message)
        return wrapped

    # -- lifecycle -----------------------------------------------------------------------------
    async def drain(self) -> None:
        await self._inflight.wait_idle()

    async def close(self) -> None:
        return None


def _label(index: int, step: ModelEnsembling.Step) -> str:
    return f"step {index} (model '{step.model_name}')"


def _fitted(value: _Value, name: str, dims: Sequence[int], batching: bool) -> Tensor:
    assert value.tensor is not None
    array = value.tensor.array
    shape = fit_batch(dims, batching, value.batch, array.shape)
    if list(array.shape) != shape:
        array = array.reshape(shape)
    return Tensor(name, value.tensor.datatype, array)


def _sequence_parameters(parameters: Parameters) -> Parameters:
    """What Triton puts in every ensemble response: the request's sequence fields."""
    return {
        "sequence_id": parameters.get("sequence_id", 0),
        "sequence_start": bool(parameters.get("sequence_start", False)),
        "sequence_end": bool(parameters.get("sequence_end", False)),
    }


# -- Triton's quirks, reproduced so that what runs here runs the same way on Triton ------------


def triton_pruned_steps(config: ModelConfig, requested: Sequence[str]) -> set[int]:
    """The steps Triton 2.51 skips when a request names only some of the ensemble's outputs.

    Triton walks back from each output *not* requested: a step none of whose outputs is
    wanted is skipped, and so, in turn, are tensors only it read. Two quirks follow, both
    observed on Triton 2.51: a step writing an unrequested ensemble output is skipped even when
    another step reads that output, and an ensemble input left unread this way counts against
    step 0 (a map lookup that defaults to 0), which can skip step 0 too. Either way the request
    then fails with Triton's "unexpected deadlock" error.
    """
    steps = list(config.ensemble_scheduling.step)
    writer: dict[str, int] = {}
    readers: dict[str, set[int]] = {}
    for index, step in enumerate(steps):
        for tensor in step.output_map.values():
            writer.setdefault(tensor, index)
        for tensor in step.input_map.values():
            readers.setdefault(tensor, set()).add(index)
    unwanted = {o.name for o in config.output} - set(requested)
    remaining: dict[int, int] = {}
    pruned: set[int] = set()
    while unwanted:  # each step is pruned at most once, so this ends
        following: set[str] = set()
        for tensor in sorted(unwanted):
            index = writer.get(tensor, 0)
            remaining[index] = remaining.get(index, len(steps[index].output_map)) - 1
            if remaining[index] == 0:
                pruned.add(index)
                following |= _released_inputs(steps[index], index, readers)
        unwanted = following
    return pruned


def _released_inputs(
    step: ModelEnsembling.Step, index: int, readers: dict[str, set[int]]
) -> set[str]:
    """Tensors that no remaining step reads once ``step`` is skipped."""
    released = set()
    for tensor in step.input_map.values():
        readers[tensor].discard(index)
        if not readers[tensor]:
            released.add(tensor)
    return released


def triton_output_order(names: Sequence[str]) -> list[str]:
    """The order Triton 2.51 lists an ensemble's outputs in a response.

    Triton keeps them in a ``std::unordered_map`` keyed by name and answers in its iteration
    order (not config, request or completion order). libstdc++ gives such a map 13 buckets for
    up to 13 entries and puts each new entry first in its bucket, or first overall when its
    bucket is empty; that is reproduced here with libstdc++'s string hash. Past 13 outputs
    (rehashing) the config order is kept.
    """
    if len(names) > _BUCKETS:
        return list(names)
    order: list[str] = []
    buckets: list[int] = []
    for name in dict.fromkeys(names):
        bucket = _std_hash(name.encode()) % _BUCKETS
        at = buckets.index(bucket) if bucket in buckets else 0
        order.insert(at, name)
        buckets.insert(at, bucket)
    return order


_BUCKETS = 13
_MASK = (1 << 64) - 1
_MUL = 0xC6A4A7935BD1E995
_SEED = 0xC70F6907


def _std_hash(data: bytes) -> int:
    """libstdc++'s ``std::hash<std::string>`` on 64-bit Linux (``_Hash_bytes``, MurmurHash2)."""

    def mix(value: int) -> int:
        return value ^ (value >> 47)

    tail = len(data) & ~7
    digest = _SEED ^ (len(data) * _MUL & _MASK)
    for start in range(0, tail, 8):
        word = int.from_bytes(data[start : start + 8], "little")
        digest = (digest ^ (mix(word * _MUL & _MASK) * _MUL & _MASK)) * _MUL & _MASK
    if len(data) & 7:
        digest = (digest ^ int.from_bytes(data[tail:], "little")) * _MUL & _MASK
    return mix(mix(digest) * _MUL & _MASK)
