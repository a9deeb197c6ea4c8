"""Load-time checks of an ensemble against its composing models.

What ``workbench.config`` cannot check from the ensemble's own file: that every step's model
exists and has the version it asks for, that ``input_map``/``output_map`` name real inputs and
outputs of that model, that no required input is left out, and that every ensemble tensor has
one data type and one shape wherever it is read or written. Mirrors Triton's
``ValidateEnsembleConfig`` (core ``src/ensemble_scheduler/ensemble_utils.cc``) and the
dependency checks of its repository manager.

Each message starts with Triton's text, then names the step, model and tensor and says what to
change. Triton stops at the first problem; these checks report every problem of a kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import DataType, ModelConfig, ModelEnsembling

__all__ = ["ComposingModel", "load_problems"]


@dataclass(frozen=True)
class ComposingModel:
    """What the server knows about a model an ensemble step calls."""

    #: found (exactly once) in the model repository, or loaded
    known: bool
    #: its completed configuration when some version is loaded
    config: ModelConfig | None = None
    #: the loaded versions
    versions: Sequence[int] = ()
    #: why its last load failed ("" when it did not)
    failure: str = ""


def load_problems(config: ModelConfig, composing: Mapping[str, ComposingModel]) -> list[str]:
    """Every reason the ensemble ``config`` cannot load with these composing models; [] if none.

    Dependencies first (a model missing or not loaded hides everything else), then the tensor
    mapping of each step and the consistency of data types and shapes.
    """
    problems = _unknown_model_problems(config, composing)
    if problems:
        return problems
    problems = list(_dependency_problems(config, composing))
    if problems:
        return problems
    configs = {name: model.config for name, model in composing.items() if model.config}
    problems = list(_batch_size_problems(config, configs))
    problems += _TensorGraph(config, configs).problems()
    return problems


def _steps(config: ModelConfig) -> list[ModelEnsembling.Step]:
    return list(config.ensemble_scheduling.step)


def _label(index: int, step: ModelEnsembling.Step) -> str:
    return f"step {index} (model '{step.model_name}')"


def _unknown_model_problems(
    config: ModelConfig, composing: Mapping[str, ComposingModel]
) -> list[str]:
    unknown = sorted({s.model_name for s in _steps(config) if not composing[s.model_name].known})
    if not unknown:
        return []
    where = ", ".join(
        f"{_label(i, s)}" for i, s in enumerate(_steps(config)) if s.model_name in unknown
    )
    return [
        f"ensemble {config.name} contains models that are not available or ambiguous: "
        f"{', '.join(unknown)}; {where}: no such model in the model repository (or it is in "
        "several repositories); fix 'model_name' or add the model"
    ]


def _dependency_problems(
    config: ModelConfig, composing: Mapping[str, ComposingModel]
) -> Iterator[str]:
    reported: set[str] = set()
    for index, step in enumerate(_steps(config)):
        name = step.model_name
        model = composing[name]
        if not model.versions or model.config is None:
            if name not in reported:
                reported.add(name)
                yield _not_loaded_message(config.name, name, model.failure)
        elif step.model_version >= 0 and step.model_version not in model.versions:
            loaded = ", ".join(str(v) for v in sorted(model.versions))
            yield (
                f"ensemble '{config.name}' depends on '{name}' whose required version "
                f"{step.model_version} is not loaded. {_label(index, step)} asks for version "
                f"{step.model_version} but '{name}' has version(s) {loaded} loaded; set its "
                "'model_version' to one of them or to -1 (the latest), or change "
                f"'version_policy' of '{name}'"
            )


def _not_loaded_message(ensemble: str, name: str, failure: str) -> str:
    message = f"ensemble '{ensemble}' depends on '{name}' which has no loaded version."
    if failure and failure != "unloaded":
        return f"{message} Model '{name}' loading failed with error: {failure}"
    return f"{message} Load '{name}' first."


def _batch_size_problems(config: ModelConfig, configs: Mapping[str, ModelConfig]) -> Iterator[str]:
    for index, step in enumerate(_steps(config)):
        limit = configs[step.model_name].max_batch_size
        if limit != 0 and limit < config.max_batch_size:
            yield (
                f"ensemble {config.name} allows maximum batch size {config.max_batch_size}, "
                f"but it contains model {step.model_name} which only allows maximum batch "
                f"size to be {limit}; {_label(index, step)}: lower the ensemble's "
                f"'max_batch_size' to {limit} or raise that of '{step.model_name}'"
            )


def _dims_str(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _dims_agree(left: Sequence[int], right: Sequence[int]) -> bool:
    """Triton's ``CompareDimsWithWildcard``: same rank, each dim equal or -1 on either side."""
    return len(left) == len(right) and all(
        a == b or a == -1 or b == -1 for a, b in zip(left, right, strict=True)
    )


def _type_name(data_type: int) -> str:
    return str(DataType.Name(data_type))


@dataclass(frozen=True)
class _Use:
    """One place an ensemble tensor is declared, read or written, with its type and shape."""

    #: the model Triton names for it (the ensemble itself, or the step's model)
    model: str
    #: where, in words: "ensemble input 'IN'", "step 1 (model 'b') input 'x'"
    where: str
    data_type: int
    dims: tuple[int, ...]
    batching: bool

    @property
    def full_dims(self) -> tuple[int, ...]:
        return (-1, *self.dims) if self.batching else self.dims


@dataclass
class _TensorGraph:
    """Triton's ``ValidateTensorMapping`` over every step, collecting every problem."""

    config: ModelConfig
    configs: Mapping[str, ModelConfig]
    first_use: dict[str, _Use] = field(default_factory=dict)

    def problems(self) -> list[str]:
        ensemble = self.config
        batching = ensemble.max_batch_size > 0
        for kind, specs in (("input", ensemble.input), ("output", ensemble.output)):
            for spec in specs:
                dims = spec.reshape.shape if spec.HasField("reshape") else spec.dims
                use = _Use(
                    ensemble.name,
                    f"ensemble {kind} '{spec.name}'",
                    spec.data_type,
                    tuple(dims),
                    batching,
                )
                self.first_use.setdefault(spec.name, use)
        found: list[str] = []
        for index, step in enumerate(_steps(ensemble)):
            found += self._step_problems(index, step)
        return found

    def _step_problems(self, index: int, step: ModelEnsembling.Step) -> list[str]:
        model = self.configs[step.model_name]
        found = list(self._name_problems(index, step, model))
        batching = model.max_batch_size > 0
        label = _label(index, step)
        inputs = {spec.name: spec for spec in model.input}
        for model_input, tensor in sorted(step.input_map.items()):
            spec = inputs.get(model_input)
            if spec is not None:
                where = f"{label} input '{model_input}'"
                use = _Use(step.model_name, where, spec.data_type, tuple(spec.dims), batching)
                found += self._consistency(tensor, use)
        outputs = {spec.name: spec for spec in model.output}
        for model_output, tensor in sorted(step.output_map.items()):
            spec = outputs.get(model_output)
            if spec is not None:
                where = f"{label} output '{model_output}'"
                use = _Use(step.model_name, where, spec.data_type, tuple(spec.dims), batching)
                found += self._consistency(tensor, use)
        return found

    def _name_problems(
        self, index: int, step: ModelEnsembling.Step, model: ModelConfig
    ) -> Iterator[str]:
        ensemble, name, label = self.config.name, step.model_name, _label(index, step)
        inputs = [spec.name for spec in model.input]
        outputs = [spec.name for spec in model.output]
        for model_input, tensor in sorted(step.input_map.items()):
            if model_input not in inputs:
                yield (
                    f"in ensemble {ensemble}, ensemble tensor {tensor} is mapping to "
                    f"non-existing input {model_input} in model {name}; {label}: the inputs "
                    f"of '{name}' are {_names(inputs)}; fix the key in 'input_map'"
                )
        for spec in model.input:
            if spec.name not in step.input_map and not spec.optional:
                yield (
                    f"in ensemble {ensemble}, input {spec.name} in model {name} is not mapped "
                    f"to any ensemble tensors; {label}: add "
                    f'input_map {{ key: "{spec.name}" value: "<ensemble tensor>" }}'
                )
        for model_output, tensor in sorted(step.output_map.items()):
            if model_output not in outputs:
                yield (
                    f"in ensemble {ensemble}, ensemble tensor {tensor} is mapped from "
                    f"non-existing output {model_output} in model {name}; {label}: the "
                    f"outputs of '{name}' are {_names(outputs)}; fix the key in 'output_map'"
                )

    def _consistency(self, tensor: str, use: _Use) -> list[str]:
        """Compare ``use`` with the tensor's first use (Triton's ``ValidateTensorConsistency``)."""
        first = self.first_use.setdefault(tensor, use)
        prefix = f"in ensemble {self.config.name}, ensemble tensor {tensor}: "
        if first.data_type != use.data_type:
            a, b = _type_name(first.data_type), _type_name(use.data_type)
            return [
                f"{prefix}inconsistent data type: {a} is inferred from model {first.model} "
                f"while {b} is inferred from model {use.model}; {first.where} is {a} but "
                f"{use.where} is {b}: make the two data types agree"
            ]
        if not _dims_agree(first.dims, use.dims) and not _dims_agree(
            first.full_dims, use.full_dims
        ):
            a, b = _dims_str(first.full_dims), _dims_str(use.full_dims)
            return [
                f"{prefix}inconsistent shape: {a} is inferred from model {first.model} while "
                f"{b} is inferred from model {use.model}; {first.where} has dims "
                f"{_dims_str(first.dims)} but {use.where} has dims {_dims_str(use.dims)} "
                "(-1 is any size; with max_batch_size > 0 the batch dimension is not part of "
                "dims): make them agree"
            ]
        return []


def _names(names: Sequence[str]) -> str:
    return ", ".join(f"'{name}'" for name in names) or "none"
