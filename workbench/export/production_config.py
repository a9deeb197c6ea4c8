"""The configuration a promoted model carries to production.

Re-serialised through Triton's protobuf schema (so only fields Triton knows survive), with the
workbench's own parameters removed (``WORKBENCH_IN_PROCESS`` and any other ``WORKBENCH_*``
key), the version policy set as asked and version numbers remapped where the promote renumbers
versions (a ``specific`` policy, an ensemble step's pinned ``model_version``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config import is_ensemble, to_pbtxt
from workbench.errors import AlreadyExistsError, InvalidArgumentError

#: parameters with this prefix mean something to the workbench only
WORKBENCH_PARAMETER_PREFIX = "WORKBENCH_"
#: ``"keep"`` (the model's own policy), ``"latest"``, ``"all"``, ``"specific"`` (exactly the
#: promoted versions) or a number N (the latest N versions)
VersionPolicy = str | int
VERSION_POLICIES = ("keep", "latest", "all", "specific")


def workbench_parameters(config: ModelConfig) -> list[str]:
    """The workbench-only parameter keys in ``config``."""
    return sorted(key for key in config.parameters if key.startswith(WORKBENCH_PARAMETER_PREFIX))


def production_config(
    config: ModelConfig,
    name: str,
    *,
    version_map: Mapping[int, int],
    step_version_maps: Mapping[str, Mapping[int, int]] | None = None,
    version_policy: VersionPolicy = "keep",
) -> ModelConfig:
    """A copy of ``config`` ready for real Triton (see the module docstring).

    ``version_map`` maps this model's source versions to their numbers at the destination;
    ``step_version_maps`` does the same for an ensemble's composing models.
    """
    result = ModelConfig()
    result.CopyFrom(config)
    result.name = name
    for key in workbench_parameters(result):
        del result.parameters[key]
    _set_policy(result, version_map, version_policy)
    if is_ensemble(result):
        for step in result.ensemble_scheduling.step:
            pinned = int(step.model_version)
            if pinned > 0:
                step.model_version = (
                    (step_version_maps or {}).get(step.model_name, {}).get(pinned, pinned)
                )
    return result


def check_version_policy(policy: VersionPolicy) -> None:
    """Refuse an unknown ``version_policy`` before anything is written."""
    if isinstance(policy, bool) or not (
        policy in VERSION_POLICIES or (isinstance(policy, int) and policy > 0)
    ):
        raise InvalidArgumentError(
            f"version_policy must be one of {', '.join(VERSION_POLICIES)} or a positive number "
            f"of latest versions, got {policy!r}"
        )


def _set_policy(config: ModelConfig, version_map: Mapping[int, int], policy: VersionPolicy) -> None:
    check_version_policy(policy)
    current = config.version_policy
    if policy == "keep":
        if current.WhichOneof("policy_choice") == "specific":
            remapped = [version_map.get(int(v), int(v)) for v in current.specific.versions]
            current.specific.ClearField("versions")
            current.specific.versions.extend(remapped)
        return
    config.ClearField("version_policy")
    if policy == "latest":
        config.version_policy.latest.num_versions = 1
    elif policy == "all":
        config.version_policy.all.SetInParent()
    elif policy == "specific":
        config.version_policy.specific.versions.extend(sorted(version_map.values()))
    else:
        config.version_policy.latest.num_versions = int(policy)


def config_diff(before: str, after: str, name: str, *, before_label: str, after_label: str) -> str:
    """A unified diff of two config texts (empty when they are the same)."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"{name}/config.pbtxt ({before_label})",
            tofile=f"{name}/config.pbtxt ({after_label})",
        )
    )


def renumber(
    name: str, source_versions: Sequence[int], existing: Sequence[int], on_conflict: str
) -> dict[int, int]:
    """Source version -> destination version. A model new at the destination keeps its
    numbers; one already there gets the next free numbers (``on_conflict="new_version"``) or
    is refused (``"refuse"``)."""
    if on_conflict not in ("new_version", "refuse"):
        raise InvalidArgumentError(
            f"on_conflict must be 'new_version' or 'refuse', got {on_conflict!r}"
        )
    if not existing:
        return {version: version for version in source_versions}
    if on_conflict == "refuse":
        raise AlreadyExistsError(
            f"model '{name}' already exists at the destination (versions "
            f"{', '.join(map(str, existing))}); pass on_conflict='new_version' to add the "
            "promoted one as a new version"
        )
    start = max(existing) + 1
    return {version: start + i for i, version in enumerate(sorted(source_versions))}


def exported_text(config: ModelConfig) -> str:
    """The config as written to the destination."""
    return to_pbtxt(config)


__all__ = [
    "VERSION_POLICIES",
    "WORKBENCH_PARAMETER_PREFIX",
    "VersionPolicy",
    "check_version_policy",
    "config_diff",
    "exported_text",
    "production_config",
    "renumber",
    "workbench_parameters",
]
