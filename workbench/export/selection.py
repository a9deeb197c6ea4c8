"""Which models and versions a promote exports.

By default every model the server has READY (sweep scratch copies left out); an ensemble
brings its composing models, and any version a step pins. ``versions`` is ``"latest"`` (the
highest ready version, or folder when the model is not loaded), ``"all"``, a version number,
a list of them, or a mapping from model name to one of those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench.config import is_ensemble, read_config
from workbench.errors import InvalidArgumentError, NotFoundError
from workbench.repository.versions import version_folders

VersionSpec = str | int | Sequence[int]
Versions = VersionSpec | Mapping[str, VersionSpec]
#: models a sweep creates next to the tuned one (``workbench.bench.scratch``)
SCRATCH_SUFFIX = "__sweep"


def ready_versions(index: Iterable[Mapping[str, Any]]) -> dict[str, list[int]]:
    """READY versions by model from a repository index (``/v2/repository/index``)."""
    ready: dict[str, list[int]] = {}
    for entry in index:
        if entry.get("state") != "READY" or str(entry.get("name", "")).endswith(SCRATCH_SUFFIX):
            continue
        version = str(entry.get("version", ""))
        found = ready.setdefault(str(entry["name"]), [])
        if version.isdigit():
            found.append(int(version))
    return {name: sorted(set(found)) for name, found in sorted(ready.items())}


def select_models(
    repository: Path,
    ready: Mapping[str, Sequence[int]],
    models: Sequence[str] | None = None,
    versions: Versions = "latest",
) -> dict[str, list[int]]:
    """``{model: [versions]}`` to export, ensembles' composing models included."""
    names = list(ready) if models is None else list(models)
    if not names:
        raise InvalidArgumentError(
            "nothing to promote: no model is READY (load one, or pass models=)"
        )
    chosen: dict[str, list[int]] = {}
    pending = [(name, _spec_for(versions, name)) for name in names]
    while pending:
        name, spec = pending.pop(0)
        model_dir = _model_dir(repository, name)
        picked = _pick(name, spec, list(ready.get(name, ())), version_folders(model_dir))
        chosen[name] = sorted(set(chosen.get(name, [])) | set(picked))
        pending += [
            (step, pin if pin > 0 else _spec_for(versions, step))
            for step, pin in _ensemble_steps(model_dir)
            if step not in chosen or (pin > 0 and pin not in chosen[step])
        ]
    return chosen


def _spec_for(versions: Versions, name: str) -> VersionSpec:
    if isinstance(versions, Mapping):
        return versions.get(name, "latest")
    return versions


def _model_dir(repository: Path, name: str) -> Path:
    model_dir = repository / name
    if not model_dir.is_dir():
        raise NotFoundError(f"model '{name}' does not exist in '{repository}'")
    if not (model_dir / "config.pbtxt").is_file():
        raise NotFoundError(f"model '{name}' has no config.pbtxt in '{repository}'")
    return model_dir


def _pick(name: str, spec: VersionSpec, ready: list[int], on_disk: list[int]) -> list[int]:
    available = [v for v in ready if v in on_disk] or on_disk
    if not available:
        raise NotFoundError(f"model '{name}' has no numeric version folder to promote")
    if spec == "latest":
        return [max(available)]
    if spec == "all":
        return available
    if isinstance(spec, str):
        raise InvalidArgumentError(
            f"versions for '{name}' must be 'latest', 'all', a number or a list, got {spec!r}"
        )
    wanted = [spec] if isinstance(spec, int) else [int(v) for v in spec]
    missing = sorted(set(wanted) - set(on_disk))
    if missing:
        raise NotFoundError(
            f"model '{name}' has no version {', '.join(map(str, missing))} "
            f"(it has {', '.join(map(str, on_disk))})"
        )
    return sorted(set(wanted))


def _ensemble_steps(model_dir: Path) -> list[tuple[str, int]]:
    config = read_config(model_dir / "config.pbtxt")
    if not is_ensemble(config):
        return []
    return [(step.model_name, int(step.model_version)) for step in config.ensemble_scheduling.step]


__all__ = ["SCRATCH_SUFFIX", "VersionSpec", "Versions", "ready_versions", "select_models"]
