"""Semantic checks of a model configuration, with messages that name model and field.

Mirrors the spirit of Triton's ``ValidateModelConfig`` / ``ValidateEnsembleSchedulingConfig``
(core/src/model_config_utils.cc) in our own words, and adds checks Triton only finds later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig

from workbench.config.defaults import BACKEND_DEFAULTS
from workbench.config.model_config import backend_name, is_ensemble
from workbench.errors import ConfigError

_PAIRS = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch",
          "tensorrt_plan": "tensorrt"}


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a config: the dotted field path and what to do about it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def validate(
    config: ModelConfig, *, model_name: str | None = None, model_path: Path | None = None
) -> list[Problem]:
    """Every problem found in ``config`` (empty when it is valid)."""
    checks = [_identity(config, model_name), _io(config), _batching(config),
              _instances(config), _versions(config)]
    if is_ensemble(config):
        checks.append(_ensemble(config))
    elif model_path is not None:
        checks.append(_files(config, model_path))
    return [problem for check in checks for problem in check]


def check(
    config: ModelConfig, *, model_name: str | None = None, model_path: Path | None = None
) -> None:
    """Raise ``ConfigError`` listing every problem, or return when the config is valid."""
    problems = validate(config, model_name=model_name, model_path=model_path)
    if problems:
        name = model_name or config.name or "<unnamed>"
        listed = "; ".join(str(p) for p in problems)
        raise ConfigError(f"model '{name}' has an invalid configuration: {listed}")


def _identity(config: ModelConfig, model_name: str | None) -> Iterator[Problem]:
    if not config.name:
        yield Problem("name", "must be set")
    elif model_name is not None and config.name != model_name:
        yield Problem("name", f"'{config.name}' must match the model directory '{model_name}'")
    if is_ensemble(config):
        if config.backend:
            yield Problem("backend", "an ensemble has no backend; remove it")
        return
    if not config.backend and not config.platform:
        yield Problem("backend", "set 'backend' (e.g. \"python\") or 'platform'")
    expected = _PAIRS.get(config.platform)
    if expected and config.backend and config.backend != expected:
        yield Problem("backend", f"'{config.backend}' does not run platform '{config.platform}'"
                      f" (expected '{expected}')")


def _io(config: ModelConfig) -> Iterator[Problem]:
    for kind, tensors in (("input", config.input), ("output", config.output)):
        counts = Counter(t.name for t in tensors)
        for name, count in counts.items():
            if name and count > 1:
                yield Problem(kind, f"{kind} name '{name}' is used {count} times")
        for index, tensor in enumerate(tensors):
            yield from _tensor(f"{kind}[{index}]", tensor, config)


def _tensor(field: str, tensor: object, config: ModelConfig) -> Iterator[Problem]:
    name = getattr(tensor, "name", "")
    if not name:
        yield Problem(f"{field}.name", "must be set")
    label = f"{field} '{name}'"
    if getattr(tensor, "data_type") == DataType.TYPE_INVALID:
        yield Problem(f"{label}.data_type", "must be set to a TYPE_* data type")
    dims = list(getattr(tensor, "dims"))
    if not dims and not tensor.HasField("reshape"):  # type: ignore[attr-defined]
        yield Problem(f"{label}.dims", "must have at least one dimension (use reshape "
                      "{ shape: [ ] } for scalars)")
    bad = [d for d in dims if d == 0 or d < -1]
    if bad:
        yield Problem(f"{label}.dims", f"dimensions must be positive or -1, got {dims}")
    if tensor.HasField("reshape") and -1 not in dims:  # type: ignore[attr-defined]
        shape = list(tensor.reshape.shape)  # type: ignore[attr-defined]
        if -1 not in shape and _product(shape) != _product(dims):
            yield Problem(f"{label}.reshape", f"reshape {shape} has a different element "
                          f"count than dims {dims}")


def _product(values: list[int]) -> int:
    result = 1
    for value in values:
        result *= value
    return result


def _batching(config: ModelConfig) -> Iterator[Problem]:
    if config.max_batch_size < 0:
        yield Problem("max_batch_size", f"must be >= 0, got {config.max_batch_size}")
    if not config.HasField("dynamic_batching"):
        return
    batching = config.dynamic_batching
    if config.max_batch_size == 0:
        yield Problem("dynamic_batching", "needs max_batch_size > 0 (the model cannot batch)")
    for size in batching.preferred_batch_size:
        if size <= 0 or (config.max_batch_size > 0 and size > config.max_batch_size):
            yield Problem("dynamic_batching.preferred_batch_size",
                          f"{size} must be between 1 and max_batch_size "
                          f"({config.max_batch_size})")
    levels = batching.priority_levels
    if levels and not 1 <= batching.default_priority_level <= levels:
        yield Problem("dynamic_batching.default_priority_level",
                      f"must be between 1 and priority_levels ({levels})")


def _instances(config: ModelConfig) -> Iterator[Problem]:
    for index, group in enumerate(config.instance_group):
        if group.count < 0:
            yield Problem(f"instance_group[{index}].count", f"must be >= 1, got {group.count}")
        if any(gpu < 0 for gpu in group.gpus):
            yield Problem(f"instance_group[{index}].gpus", "GPU ids must be >= 0")


def _versions(config: ModelConfig) -> Iterator[Problem]:
    policy = config.version_policy
    if policy.WhichOneof("policy_choice") == "specific" and not policy.specific.versions:
        yield Problem("version_policy.specific.versions", "must list at least one version")
    if policy.WhichOneof("policy_choice") == "latest" and policy.latest.num_versions < 1:
        yield Problem("version_policy.latest.num_versions", "must be >= 1")


def _files(config: ModelConfig, model_path: Path) -> Iterator[Problem]:
    backend = backend_name(config)
    if backend != "python":
        return
    filename = config.default_model_filename or BACKEND_DEFAULTS["python"][1]
    versions = [p for p in model_path.iterdir() if p.is_dir() and p.name.isdigit()]
    if versions and not any((v / filename).is_file() for v in versions):
        yield Problem("default_model_filename",
                      f"python backend needs '{filename}' in a version folder "
                      f"(e.g. {model_path.name}/1/{filename})")


def _ensemble(config: ModelConfig) -> Iterator[Problem]:
    steps = config.ensemble_scheduling.step
    if not steps:
        yield Problem("ensemble_scheduling.step", "an ensemble needs at least one step")
        return
    available = {t.name for t in config.input}
    writers: dict[str, int] = {}
    for index, step in enumerate(steps):
        where = f"ensemble_scheduling.step[{index}]"
        if not step.model_name:
            yield Problem(f"{where}.model_name", "must name a model")
        for tensor in step.output_map.values():
            if tensor in writers:
                yield Problem(f"{where}.output_map", f"tensor '{tensor}' is already written "
                              f"by step {writers[tensor]}")
            writers[tensor] = index
    produced = available | set(writers)
    for index, step in enumerate(steps):
        for model_input, tensor in step.input_map.items():
            if tensor not in produced:
                yield Problem(f"ensemble_scheduling.step[{index}].input_map",
                              f"'{model_input}' of model '{step.model_name}' reads tensor "
                              f"'{tensor}', which is neither an ensemble input nor written "
                              "by any step")
    for output in config.output:
        if output.name not in writers:
            yield Problem("output", f"ensemble output '{output.name}' is never written by a step")
    yield from _cycles(config)


def _cycles(config: ModelConfig) -> Iterator[Problem]:
    steps = config.ensemble_scheduling.step
    writer = {t: i for i, s in enumerate(steps) for t in s.output_map.values()}
    needs = {i: {writer[t] for t in s.input_map.values() if t in writer}
             for i, s in enumerate(steps)}
    done: set[int] = set()
    while True:
        ready = {i for i, deps in needs.items() if i not in done and deps <= done}
        if not ready:
            break
        done |= ready
    stuck = sorted(set(needs) - done)
    if stuck:
        names = ", ".join(f"{i} ('{steps[i].model_name}')" for i in stuck)
        yield Problem("ensemble_scheduling.step", f"steps {names} form a cycle")
