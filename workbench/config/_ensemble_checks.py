"""Checks of ensembles: the steps and the data flow between their tensors.

Mirrors Triton's ``ValidateEnsembleSchedulingConfig``/``BuildEnsembleGraph``: every step
names a model and maps inputs and outputs, each ensemble tensor is written once, every read
tensor is an ensemble input or written by some step, every ensemble input is read, every
ensemble output is written and reachable, no step output goes unused, and steps form no cycle.

Each message starts with Triton's own text where Triton has one (so that users who search for
it find it), then says which step and tensor are at fault and what to change. Triton stops at
the first problem; these checks report all of them. Checks that need the composing models'
configurations (dtypes, shapes, input and output names) run at load time, in
``workbench.core.ensemble_validation``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass

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
                f"ensemble scheduling cannot be set for model '{ctx.model}' whose platform is "
                "not ensemble; set platform: \"ensemble\" or remove 'ensemble_scheduling' "
                "(only an ensemble may set it)",
            )
        return
    yield from _forbidden_field_problems(ctx)
    if not config.ensemble_scheduling.step:
        yield ctx.problem(
            _STEP,
            f"must specify 'step' for ensemble '{ctx.model}'; add 'ensemble_scheduling "
            "{ step [...] }' with at least one step",
        )
        return
    yield from _step_field_problems(ctx)
    writers = yield from _writer_problems(ctx)
    yield from _unknown_source_problems(ctx, writers)
    yield from _ensemble_io_problems(ctx, writers)
    yield from _unused_output_problems(ctx)
    yield from _flow_problems(ctx, writers)


_FORBIDDEN = (
    (
        "instance_group",
        "instance group should not be specified",
        "each composing model has its own",
    ),
    ("optimization", "optimization should not be specified", "set it on the composing models"),
    ("model_warmup", "model_warmup can not be specified", "warm up the composing models instead"),
)


def _forbidden_field_problems(ctx: Context) -> Iterator[Problem]:
    config = ctx.config
    present = {
        "instance_group": bool(config.instance_group),
        "optimization": config.HasField("optimization"),
        "model_warmup": bool(config.model_warmup),
    }
    for field, triton_text, hint in _FORBIDDEN:
        if present[field]:
            yield ctx.problem(
                field, f"{triton_text} for ensemble '{ctx.model}'; remove '{field}' ({hint})"
            )


def _step_label(ctx: Context, index: int) -> str:
    step = ctx.config.ensemble_scheduling.step[index]
    return f"step {index} (model '{step.model_name}')"


def _step_field_problems(ctx: Context) -> Iterator[Problem]:
    hints = {
        "input_map": "map each input of the model to an ensemble tensor",
        "output_map": "map the model outputs that later steps or the ensemble outputs use",
    }
    for index, step in enumerate(ctx.config.ensemble_scheduling.step):
        if not step.model_name:
            yield ctx.problem(
                f"{_STEP}[{index}].model_name",
                f"must specify 'model_name' in step {index} of ensemble '{ctx.model}'",
            )
        for field, hint in hints.items():
            if not getattr(step, field):
                yield ctx.problem(
                    f"{_STEP}[{index}].{field}",
                    f"must specify '{field}' in step {index} of ensemble '{ctx.model}': "
                    f"{_step_label(ctx, index)} has an empty '{field}'; {hint}",
                )


def _writer_problems(ctx: Context) -> Generator[Problem, None, dict[str, int]]:
    """Yield tensors written twice; return ``{tensor: index of the first step writing it}``."""
    writers: dict[str, int] = {}
    for index, step in enumerate(ctx.config.ensemble_scheduling.step):
        for tensor in step.output_map.values():
            if tensor in writers:
                yield ctx.problem(
                    f"{_STEP}[{index}].output_map",
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{ctx.model}' step {index}: {_step_label(ctx, index)} writes "
                    f"'{tensor}', which step {writers[tensor]} already writes; map one of "
                    "them to another tensor name",
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
                    f"ensemble tensor '{tensor}' is not connected: {_step_label(ctx, index)} "
                    f"feeds its input '{model_input}' from '{tensor}', which is neither an "
                    "ensemble input nor written by any step; declare it in 'input' or map a "
                    "step output to it",
                )


def _ensemble_io_problems(ctx: Context, writers: dict[str, int]) -> Iterator[Problem]:
    steps = ctx.config.ensemble_scheduling.step
    read = {tensor for step in steps for tensor in step.input_map.values()}
    for index, tensor in enumerate(ctx.config.input):
        if tensor.name and tensor.name not in read and tensor.name not in writers:
            # Triton's text, quote mismatch included ("for ensemble e' is not used").
            yield ctx.problem(
                f"input[{index}].name",
                f"ensemble input '{tensor.name}' for ensemble {ctx.model}' is not used: "
                f"no step reads '{tensor.name}'; read it in some step's 'input_map' or "
                "remove it from 'input'",
            )
    for index, tensor in enumerate(ctx.config.output):
        if not tensor.name or tensor.name in writers:
            continue
        triton_text = (
            f"output '{tensor.name}' for ensemble '{ctx.model}' is not written"
            if tensor.name in read
            else f"ensemble output '{tensor.name}' for ensemble {ctx.model}' is not used"
        )
        yield ctx.problem(
            f"output[{index}].name",
            f"{triton_text}: no step writes '{tensor.name}'; map a step output to it in "
            "that step's 'output_map'",
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
                    f"ensemble tensor '{tensor}' is unused in ensemble '{ctx.model}': "
                    f"{_step_label(ctx, index)} writes '{tensor}', which no step reads and "
                    "which is not an ensemble output; remove it from that step's 'output_map' "
                    "or declare it in 'output'",
                )


@dataclass(frozen=True)
class _Flow:
    """What becomes available when the ensemble inputs arrive and steps run as they can."""

    ready: frozenset[str]
    blocked: frozenset[int]


def _flow_problems(ctx: Context, writers: dict[str, int]) -> Iterator[Problem]:
    """Report cycles among steps, then ensemble outputs that can never be computed."""
    flow = _simulate(ctx)
    cycle = _find_cycle(ctx, writers, flow.blocked)
    if cycle:
        yield ctx.problem(
            _STEP,
            f"steps form a cycle: {_cycle_path(ctx, cycle)}; feed one of "
            "these steps from an ensemble input or an earlier step instead",
        )
    for index, tensor in enumerate(ctx.config.output):
        writer = writers.get(tensor.name)
        if writer is None or writer not in flow.blocked:
            continue
        source = _unconnected_source(ctx, tensor.name, writers, flow.ready)
        yield ctx.problem(
            f"output[{index}].name",
            f"output '{tensor.name}' for ensemble '{ctx.model}' is not written: at least one "
            f"of its depending tensors, '{source}', is not connected; "
            f"{_step_label(ctx, writer)} writes '{tensor.name}' but can never run, because "
            "its inputs are never all available",
        )


def _simulate(ctx: Context) -> _Flow:
    """Run the graph on paper, starting from the ensemble inputs."""
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
    return _Flow(frozenset(ready), frozenset(pending))


def _unconnected_source(
    ctx: Context, tensor: str, writers: dict[str, int], ready: frozenset[str]
) -> str:
    """Walk back from ``tensor`` through tensors never available, as Triton names the culprit."""
    steps = ctx.config.ensemble_scheduling.step
    seen = {tensor}
    current = tensor
    while current in writers:
        sources = steps[writers[current]].input_map.values()
        following = next((t for t in sources if t not in ready and t not in seen), None)
        if following is None:
            break
        seen.add(following)
        current = following
    return current


def _find_cycle(ctx: Context, writers: dict[str, int], blocked: frozenset[int]) -> list[int]:
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


def _cycle_path(ctx: Context, cycle: list[int]) -> str:
    """``step 0 (model 'a') -> 't1' -> step 1 (model 'b') -> 't2' -> step 0 (model 'a')``."""
    steps = ctx.config.ensemble_scheduling.step
    parts = [_step_label(ctx, cycle[0])]
    for writer, reader in zip(cycle, [*cycle[1:], cycle[0]], strict=True):
        written = set(steps[writer].output_map.values())
        tensor = next(t for t in steps[reader].input_map.values() if t in written)
        parts += [f"'{tensor}'", _step_label(ctx, reader)]
    return " -> ".join(parts)
