"""Checks of ensembles: the steps and the data flow between their tensors.

Mirrors Triton's ``ValidateEnsembleSchedulingConfig``/``BuildEnsembleGraph``: every step
names a model and maps inputs and outputs, each ensemble tensor is written once, every read
tensor is an ensemble input or written by some step, every ensemble input is read, every
ensemble output is written and reachable, no step output goes unused, and steps form no cycle.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

from workbench.config._context import Context, Problem
from workbench.config.platforms import is_ensemble

_STEP = "ensemble_scheduling.step"


def ensemble_problems(ctx: Context) -> Iterator[Problem]:
    """Problems of ``ensemble_scheduling`` (or of its absence on an ensemble)."""
    config = ctx.config
    if not is_ensemble(config):
        if config.HasField("ensemble_scheduling"):
            yield ctx.problem(
                "ensemble_scheduling",
                "only an ensemble (platform \"ensemble\") may set 'ensemble_scheduling'",
            )
        return
    yield from _forbidden_field_problems(ctx)
    if not config.ensemble_scheduling.step:
        yield ctx.problem(_STEP, "an ensemble needs 'ensemble_scheduling' with at least one step")
        return
    yield from _step_field_problems(ctx)
    writers = yield from _writer_problems(ctx)
    yield from _unknown_source_problems(ctx, writers)
    yield from _ensemble_io_problems(ctx, writers)
    yield from _unused_output_problems(ctx)
    yield from _flow_problems(ctx, writers)


def _forbidden_field_problems(ctx: Context) -> Iterator[Problem]:
    config = ctx.config
    forbidden = (
        ("instance_group", bool(config.instance_group)),
        ("optimization", config.HasField("optimization")),
        ("model_warmup", bool(config.model_warmup)),
    )
    for field, present in forbidden:
        if present:
            yield ctx.problem(field, f"an ensemble cannot set '{field}'; remove it")


def _step_label(ctx: Context, index: int) -> str:
    step = ctx.config.ensemble_scheduling.step[index]
    return f"step {index} (model '{step.model_name}')"


def _step_field_problems(ctx: Context) -> Iterator[Problem]:
    for index, step in enumerate(ctx.config.ensemble_scheduling.step):
        if not step.model_name:
            yield ctx.problem(f"{_STEP}[{index}].model_name", f"step {index} has no 'model_name'")
        for field in ("input_map", "output_map"):
            if not getattr(step, field):
                yield ctx.problem(
                    f"{_STEP}[{index}].{field}", f"{_step_label(ctx, index)} has an empty '{field}'"
                )


def _writer_problems(ctx: Context) -> Generator[Problem, None, dict[str, int]]:
    """Yield tensors written twice; return ``{tensor: index of the first step writing it}``."""
    writers: dict[str, int] = {}
    for index, step in enumerate(ctx.config.ensemble_scheduling.step):
        for tensor in step.output_map.values():
            if tensor in writers:
                yield ctx.problem(
                    f"{_STEP}[{index}].output_map",
                    f"{_step_label(ctx, index)} writes "
                    f"ensemble tensor '{tensor}', which step {writers[tensor]} already writes",
                )
            else:
                writers[tensor] = index
    return writers


def _unknown_source_problems(ctx: Context, writers: dict[str, int]) -> Iterator[Problem]:
    inputs = {tensor.name for tensor in ctx.config.input}
    for index, step in enumerate(ctx.config.ensemble_scheduling.step):
        for model_input, tensor in step.input_map.items():
            if tensor not in inputs and tensor not in writers:
                yield ctx.problem(
                    f"{_STEP}[{index}].input_map",
                    f"{_step_label(ctx, index)} feeds its "
                    f"input '{model_input}' from '{tensor}', which is neither an ensemble "
                    "input nor written by any step",
                )


def _ensemble_io_problems(ctx: Context, writers: dict[str, int]) -> Iterator[Problem]:
    steps = ctx.config.ensemble_scheduling.step
    read = {tensor for step in steps for tensor in step.input_map.values()}
    for index, tensor in enumerate(ctx.config.input):
        if tensor.name and tensor.name not in read:
            yield ctx.problem(
                f"input[{index}].name", f"ensemble input '{tensor.name}' is not read by any step"
            )
    for index, tensor in enumerate(ctx.config.output):
        if tensor.name and tensor.name not in writers:
            yield ctx.problem(
                f"output[{index}].name",
                f"ensemble output '{tensor.name}' is not written by "
                "any step; map a step output to it in 'output_map'",
            )


def _unused_output_problems(ctx: Context) -> Iterator[Problem]:
    steps = ctx.config.ensemble_scheduling.step
    read = {tensor for step in steps for tensor in step.input_map.values()}
    outputs = {tensor.name for tensor in ctx.config.output}
    for index, step in enumerate(steps):
        for tensor in step.output_map.values():
            if tensor not in read and tensor not in outputs:
                yield ctx.problem(
                    f"{_STEP}[{index}].output_map",
                    f"{_step_label(ctx, index)} writes "
                    f"'{tensor}', which no step reads and which is not an ensemble output",
                )


def _flow_problems(ctx: Context, writers: dict[str, int]) -> Iterator[Problem]:
    """Report cycles among steps, then ensemble outputs that can never be computed."""
    blocked = _blocked_steps(ctx)
    cycle = _find_cycle(ctx, writers, blocked)
    if cycle:
        path = " -> ".join(_step_label(ctx, index) for index in [*cycle, cycle[0]])
        yield ctx.problem(_STEP, f"steps form a cycle: {path}")
    for index, tensor in enumerate(ctx.config.output):
        writer = writers.get(tensor.name)
        if writer is not None and writer in blocked:
            yield ctx.problem(
                f"output[{index}].name",
                f"ensemble output '{tensor.name}' can never be "
                f"computed: {_step_label(ctx, writer)} waits for tensors that never arrive",
            )


def _blocked_steps(ctx: Context) -> set[int]:
    """Steps whose inputs never all become available, starting from the ensemble inputs."""
    steps = ctx.config.ensemble_scheduling.step
    ready = {tensor.name for tensor in ctx.config.input}
    pending = set(range(len(steps)))
    progress = True
    while progress:
        runnable = {i for i in pending if set(steps[i].input_map.values()) <= ready}
        for index in runnable:
            ready.update(steps[index].output_map.values())
        pending -= runnable
        progress = bool(runnable)
    return pending


def _find_cycle(ctx: Context, writers: dict[str, int], blocked: set[int]) -> list[int]:
    """One cycle among the blocked steps (a step feeding itself, maybe via others), or []."""
    steps = ctx.config.ensemble_scheduling.step
    feeds = {
        index: sorted({writers[t] for t in steps[index].input_map.values() if t in writers})
        for index in blocked
    }
    for start in sorted(blocked):
        cycle = _walk(start, feeds, [])
        if cycle:
            # The walk goes against the data flow (to the feeding step); report flow order,
            # starting from the lowest step index.
            flow = cycle[::-1]
            first = flow.index(min(flow))
            return flow[first:] + flow[:first]
    return []


def _walk(index: int, feeds: dict[int, list[int]], path: list[int]) -> list[int]:
    if index in path:
        return path[path.index(index) :]
    for source in feeds.get(index, []):
        cycle = _walk(source, feeds, [*path, index])
        if cycle:
            return cycle
    return []
