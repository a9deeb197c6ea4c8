"""Numeric version folders and the ``version_policy`` that picks which of them to serve.

Mirrors ``VersionsToLoad`` in Triton's ``core/src/model_repository_manager/model_lifecycle.cc``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.errors import InvalidArgumentError

_log = logging.getLogger(__name__)

#: Sub-folders of a model that Triton never treats as versions.
RESERVED_FOLDERS = frozenset({"configs", "warmup", "initial_state"})


def parse_version_folder(name: str) -> int | None:
    """The version a folder name stands for, or ``None`` when Triton would ignore the folder.

    Triton ignores names with a leading zero (``"01"``) but, as its code does (its docs say
    otherwise), accepts ``"0"`` itself as version 0. Only plain ASCII digits count: Triton's
    ``std::stoll`` would also read ``"1abc"`` as 1, a quirk not copied here because two such
    folders would claim the same version.
    """
    if name in RESERVED_FOLDERS:
        return None
    if not (name.isascii() and name.isdigit()):
        _log.warning(
            "ignore version directory '%s' which fails to convert to integral number", name
        )
        return None
    if len(name) > 1 and name.startswith("0"):
        _log.warning(
            "ignore version directory '%s' which contains leading zeros in its directory name", name
        )
        return None
    return int(name)


def version_folders(model_dir: Path) -> list[int]:
    """Versions present under ``model_dir``, ascending (only folders count, hidden ones never)."""
    versions: set[int] = set()
    for entry in model_dir.iterdir():
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        version = parse_version_folder(entry.name)
        if version is not None:
            versions.add(version)
    return sorted(versions)


def select_versions(
    config: ModelConfig | None, available: Iterable[int], *, model_name: str = ""
) -> list[int]:
    """The versions to load under ``config.version_policy``, ascending.

    ``latest { num_versions: n }`` takes the n highest (the default policy is latest 1),
    ``all`` takes every one, ``specific { versions: [...] }`` takes the listed ones that exist;
    as in Triton, a listed version without its folder is logged and skipped. Raises
    ``InvalidArgumentError`` with Triton's message when nothing is left to load (naming
    ``model_name``, else ``config.name``).
    """
    present = sorted(set(available))
    model_name = model_name or (config.name if config is not None else "")
    selected, missing = _apply_policy(config, present)
    for version in missing:
        _log.error(
            "version %d is specified for model '%s', but the version directory is not present",
            version,
            model_name,
        )
    if not selected:
        raise InvalidArgumentError(_no_version_message(model_name, missing))
    return selected


def _apply_policy(config: ModelConfig | None, present: list[int]) -> tuple[list[int], list[int]]:
    """(selected, specified-but-missing) versions for the config's policy."""
    choice = _policy_choice(config)
    if choice == "default":
        return present[-1:], []
    if choice == "latest":
        assert config is not None
        count = config.version_policy.latest.num_versions
        return (present[-count:] if count > 0 else []), []
    if choice == "specific":
        assert config is not None
        wanted = sorted(set(config.version_policy.specific.versions))
        return [v for v in wanted if v in present], [v for v in wanted if v not in present]
    return present, []


def _policy_choice(config: ModelConfig | None) -> str:
    """``"latest"``, ``"all"``, ``"specific"``, or ``"default"`` (latest 1) when unset."""
    if config is None or not config.HasField("version_policy"):
        return "default"
    # An empty ``version_policy {}`` falls through to "all" in Triton's VersionsToLoad.
    return config.version_policy.WhichOneof("policy_choice") or "all"


def _no_version_message(model_name: str, missing: list[int]) -> str:
    message = (
        f"at least one version must be available under the version policy of model '{model_name}'"
    )
    if missing:
        listed = ", ".join(str(v) for v in missing)
        message += f" (specific version(s) {listed} have no version directory)"
    return message
