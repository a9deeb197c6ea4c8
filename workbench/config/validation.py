"""Semantic checks of a model configuration, every problem at once, each naming model and field.

Mirrors the rules of Triton's ``ValidateModelConfig``, ``ValidateModelIOConfig``,
``ValidateInstanceGroup`` and ``ValidateEnsembleSchedulingConfig`` (triton-inference-server/
core, src/model_config_utils.cc) in our own words. Where Triton fills a field in before it
validates (empty ``name``, ``backend`` inferred from the files), the raw config passes here
too. Tensor checks live in ``_tensor_checks``, ensemble checks in ``_ensemble_checks``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import (
    DataType,
    ModelConfig,
    ModelInstanceGroup,
    ModelQueuePolicy,
    ModelSequenceBatching,
)

from workbench.config._context import Context, Problem
from workbench.config._ensemble_checks import ensemble_problems
from workbench.config._tensor_checks import tensor_problems
from workbench.config.platforms import (
    BACKEND_PLATFORMS,
    ENSEMBLE_PLATFORM,
    PLATFORM_BACKENDS,
    PYTHON_BACKEND,
    PYTHON_FILENAME,
    backend_from_files,
    backend_name,
    is_ensemble,
    version_folders,
)
from workbench.errors import ConfigError

__all__ = ["Problem", "check", "validate"]

_Check = Callable[[Context], Iterator[Problem]]


def validate(
    config: ModelConfig, *, model_name: str | None = None, model_path: Path | None = None
) -> list[Problem]:
    """Every problem in ``config``; an empty list when it is valid.

    ``model_name`` is the model's directory name (``name`` must match it, or may be empty);
    ``model_path`` the model directory, to check the model files a backend needs.
    """
    ctx = Context(config, model_name or config.name or "<unnamed>", model_name, model_path)
    checks: tuple[_Check, ...] = (
        _name_problems,
        _backend_problems,
        _batch_size_problems,
        _version_policy_problems,
        tensor_problems,
        _dynamic_batching_problems,
        _sequence_batching_problems,
        _instance_group_problems,
        _response_cache_problems,
        ensemble_problems,
        _model_file_problems,
    )
    return [problem for check_fn in checks for problem in check_fn(ctx)]


def check(
    config: ModelConfig, *, model_name: str | None = None, model_path: Path | None = None
) -> None:
    """Raise ``ConfigError`` listing every problem; return quietly when ``config`` is valid."""
    problems = validate(config, model_name=model_name, model_path=model_path)
    if problems:
        model = model_name or config.name or "<unnamed>"
        listed = "; ".join(str(problem) for problem in problems)
        raise ConfigError(f"model '{model}' has an invalid configuration: {listed}")


def _name_problems(ctx: Context) -> Iterator[Problem]:
    name = ctx.config.name
    if not name and ctx.model_name is None:
        yield ctx.problem("name", "'name' is empty; set it to the model's directory name")
    elif name and ctx.model_name is not None and name != ctx.model_name:
        yield ctx.problem(
            "name",
            f"'name' is '{name}' but the model directory is '{ctx.model_name}'; they must match",
        )


def _backend_problems(ctx: Context) -> Iterator[Problem]:
    config = ctx.config
    if is_ensemble(config):
        if config.backend:
            yield ctx.problem("backend", "an ensemble has no backend; remove 'backend'")
    elif not config.backend and not config.platform:
        if ctx.model_path is None or not backend_from_files(ctx.model_path):
            yield ctx.problem(
                "backend", "set 'backend' (python, onnxruntime, pytorch, tensorrt) or 'platform'"
            )
    elif not config.backend and config.platform not in PLATFORM_BACKENDS:
        known = ", ".join(sorted([*PLATFORM_BACKENDS, ENSEMBLE_PLATFORM]))
        yield ctx.problem(
            "platform", f"unknown platform '{config.platform}'; use one of {known} or set 'backend'"
        )
    elif config.backend in BACKEND_PLATFORMS and config.platform:
        allowed = BACKEND_PLATFORMS[config.backend]
        if config.platform not in allowed:
            yield ctx.problem(
                "platform",
                f"platform '{config.platform}' does not go with backend "
                f"'{config.backend}'; use {' or '.join(allowed)}, or remove 'platform'",
            )


def _batch_size_problems(ctx: Context) -> Iterator[Problem]:
    if ctx.config.max_batch_size < 0:
        yield ctx.problem(
            "max_batch_size",
            f"'max_batch_size' is {ctx.config.max_batch_size}; use 0 "
            "(no batching) or a positive size",
        )


def _version_policy_problems(ctx: Context) -> Iterator[Problem]:
    policy = ctx.config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "specific" and not policy.specific.versions:
        yield ctx.problem(
            "version_policy.specific.versions",
            "the specific version policy lists no versions, so no version would load",
        )
    elif choice == "latest" and policy.latest.num_versions < 1:
        yield ctx.problem("version_policy.latest.num_versions", "'num_versions' must be at least 1")


def _dynamic_batching_problems(ctx: Context) -> Iterator[Problem]:
    # Triton accepts dynamic batching with max_batch_size 0 (nothing is batched), so do we.
    if not ctx.config.HasField("dynamic_batching"):
        return
    batching = ctx.config.dynamic_batching
    field = "dynamic_batching.preferred_batch_size"
    yield from _preferred_size_problems(ctx, field, batching.preferred_batch_size)
    yield from _priority_problems(ctx)
    if batching.preserve_ordering:
        yield from _preserve_ordering_problems(ctx)


def _preferred_size_problems(ctx: Context, field: str, sizes: list[int]) -> Iterator[Problem]:
    limit = ctx.config.max_batch_size
    for size in sizes:
        if size <= 0:
            yield ctx.problem(field, f"preferred batch size {size} must be positive")
        elif size > limit:
            yield ctx.problem(
                field, f"preferred batch size {size} is larger than max_batch_size ({limit})"
            )


def _priority_problems(ctx: Context) -> Iterator[Problem]:
    batching = ctx.config.dynamic_batching
    levels = batching.priority_levels
    if levels == 0:
        return
    if not 1 <= batching.default_priority_level <= levels:
        yield ctx.problem(
            "dynamic_batching.default_priority_level",
            f"'default_priority_level' is "
            f"{batching.default_priority_level}; it must be in [1, {levels}] (priority_levels)",
        )
    for level in batching.priority_queue_policy:
        if not 1 <= level <= levels:
            yield ctx.problem(
                "dynamic_batching.priority_queue_policy",
                f"policy for priority level {level} is outside [1, {levels}] (priority_levels)",
            )


def _preserve_ordering_problems(ctx: Context) -> Iterator[Problem]:
    batching = ctx.config.dynamic_batching
    if batching.priority_levels > 1:
        yield ctx.problem(
            "dynamic_batching.priority_levels", "'preserve_ordering' allows only one priority level"
        )
    policies = [("default_queue_policy", batching.default_queue_policy)] + [
        (f"priority_queue_policy[{level}]", policy)
        for level, policy in batching.priority_queue_policy.items()
    ]
    for name, policy in policies:
        delays = policy.timeout_action == ModelQueuePolicy.DELAY
        if delays and policy.default_timeout_microseconds != 0:
            yield ctx.problem(
                f"dynamic_batching.{name}.timeout_action",
                "timeout action DELAY cannot be combined with 'preserve_ordering'",
            )


_CORRID_TYPES = frozenset(
    {
        DataType.TYPE_UINT64,
        DataType.TYPE_INT64,
        DataType.TYPE_UINT32,
        DataType.TYPE_INT32,
        DataType.TYPE_STRING,
    }
)


def _sequence_batching_problems(ctx: Context) -> Iterator[Problem]:
    if not ctx.config.HasField("sequence_batching"):
        return
    sequence = ctx.config.sequence_batching
    if sequence.HasField("oldest"):
        field = "sequence_batching.oldest.preferred_batch_size"
        yield from _preferred_size_problems(ctx, field, sequence.oldest.preferred_batch_size)
    if sequence.HasField("direct") and not 0.0 <= sequence.direct.minimum_slot_utilization <= 1:
        yield ctx.problem(
            "sequence_batching.direct.minimum_slot_utilization",
            "'minimum_slot_utilization' must be in (0.0, 1.0]",
        )
    for index, control_input in enumerate(sequence.control_input):
        for control in control_input.control:
            corrid = control.kind == ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
            if corrid and control.data_type not in _CORRID_TYPES:
                yield ctx.problem(
                    f"sequence_batching.control_input[{index}].control",
                    "the CORRID control "
                    "must be TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING",
                )


def _instance_group_problems(ctx: Context) -> Iterator[Problem]:
    # KIND_GPU on a machine without GPUs is for the runtime to refuse, not the config.
    for index, group in enumerate(ctx.config.instance_group):
        field = f"instance_group[{index}]"
        label = f"instance group '{group.name or index}'"
        if group.count < 0:
            # Stricter than Triton, which silently treats any count < 1 as the default.
            yield ctx.problem(f"{field}.count", f"{label} has count {group.count}; use >= 1")
        if group.gpus and group.kind in (
            ModelInstanceGroup.KIND_CPU,
            ModelInstanceGroup.KIND_MODEL,
        ):
            kind = ModelInstanceGroup.Kind.Name(group.kind)
            yield ctx.problem(f"{field}.gpus", f"{label} has kind {kind} but lists GPUs")
        if any(gpu < 0 for gpu in group.gpus):
            yield ctx.problem(f"{field}.gpus", f"{label} lists a negative GPU id")
        if group.profile and backend_name(ctx.config) != "tensorrt":
            yield ctx.problem(f"{field}.profile", f"{label}: 'profile' is for TensorRT only")


def _response_cache_problems(ctx: Context) -> Iterator[Problem]:
    config = ctx.config
    if not config.response_cache.enable:
        return
    if config.HasField("sequence_batching"):
        yield ctx.problem(
            "response_cache.enable", "the response cache does not support sequence batching"
        )
    if config.model_transaction_policy.decoupled:
        yield ctx.problem(
            "response_cache.enable", "the response cache does not support decoupled models"
        )


def _model_file_problems(ctx: Context) -> Iterator[Problem]:
    """The python backend loads ``<model>/<version>/model.py``; some version must have it."""
    if ctx.model_path is None:
        return
    backend = backend_name(ctx.config) or backend_from_files(ctx.model_path)
    if backend != PYTHON_BACKEND:
        return
    filename = ctx.config.default_model_filename or PYTHON_FILENAME
    folders = version_folders(ctx.model_path)
    if not any((folder / filename).is_file() for folder in folders):
        where = ", ".join(str(folder / filename) for folder in folders) or (
            f"{ctx.model_path}/<version>/{filename} (there is no numeric version folder)"
        )
        yield ctx.problem(
            "default_model_filename",
            f"the python backend needs '{filename}' in a version folder; not found: {where}",
        )
