"""Gather what ``build_graph`` needs from a running ``Workbench``: the ensemble's config (as
served, else from disk when it did not load), each step model's config, state and statistics,
and the problems both validators find (``workbench.config`` on the ensemble's own file,
``workbench.core.ensemble_validation`` against the composing models)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config import Problem, is_ensemble, read_config, validate
from workbench.config.platforms import version_folders
from workbench.core.ensemble_validation import ComposingModel, load_problems
from workbench.errors import InvalidArgumentError, NotFoundError, WorkbenchError
from workbench.notebook.dag import EnsembleGraph, StepModel, build_graph

if TYPE_CHECKING:
    from workbench.notebook.workbench import Workbench


def _index(bench: Workbench) -> dict[str, list[dict[str, Any]]]:
    entries: dict[str, list[dict[str, Any]]] = {}
    for entry in bench.http.index():
        entries.setdefault(entry["name"], []).append(entry)
    return entries


def _state(entries: list[dict[str, Any]]) -> tuple[str, str]:
    if any(e.get("state") == "READY" for e in entries):
        return "READY", ""
    if not entries:
        return "", ""
    return entries[0].get("state", ""), entries[0].get("reason", "")


def _config(bench: Workbench, name: str, ready: bool) -> ModelConfig | None:
    """Served config when loaded, else the file on disk (None when it is nowhere/unreadable)."""
    try:
        return bench.config(name) if ready else read_config(bench.model_dir(name) / "config.pbtxt")
    except WorkbenchError:
        return None


def _stats(bench: Workbench, name: str) -> dict[str, float] | None:
    rows = bench.http.statistics(name)
    success = sum(row["success"] for row in rows)
    if not success:
        return None
    # Averages per request, weighted over versions by their successful requests.
    merged: dict[str, float] = {"success": float(success)}
    for key in ("queue_us", "compute_input_us", "compute_infer_us", "compute_output_us"):
        merged[key] = sum(row[key] * row["success"] for row in rows) / success
    return merged


def _step_model(bench: Workbench, name: str, entries: list[dict[str, Any]]) -> StepModel:
    state, reason = _state(entries)
    ready = state == "READY"
    return StepModel(
        _config(bench, name, ready), state, reason, _stats(bench, name) if ready else None
    )


def _composing(
    bench: Workbench, name: str, model: StepModel, entries: list[dict[str, Any]]
) -> ComposingModel:
    """For the load-time checks: loaded versions, else the version folders on disk, so the
    tensor checks also run for models that are not loaded (their state is shown apart)."""
    versions = [
        int(e["version"]) for e in entries if e.get("state") == "READY" and e.get("version")
    ]
    if not versions and model.config is not None:
        try:
            versions = [int(f.name) for f in version_folders(bench.model_dir(name))]
        except NotFoundError:
            versions = []
    return ComposingModel(model.config is not None, model.config, versions or [1])


def ensemble_graph(bench: Workbench, name: str) -> EnsembleGraph:
    """The graph of ensemble ``name`` with every problem found, and step statistics."""
    index = _index(bench)
    state, reason = _state(index.get(name, []))
    config = _config(bench, name, state == "READY")
    if config is None:
        raise NotFoundError(f"model '{name}' is neither served nor has a readable config.pbtxt")
    if not is_ensemble(config):
        raise InvalidArgumentError(
            f"model '{name}' is not an ensemble (platform '{config.platform}'); dag() draws "
            "ensembles"
        )
    names = {step.model_name for step in config.ensemble_scheduling.step}
    steps = {n: _step_model(bench, n, index.get(n, [])) for n in names}
    model_path = bench.repository / name
    problems: list[Problem | str] = list(
        validate(config, model_name=name, model_path=model_path if model_path.is_dir() else None)
    )
    composing = {n: _composing(bench, n, steps[n], index.get(n, [])) for n in names}
    problems += [p for p in load_problems(config, composing) if p not in problems]
    return build_graph(config, steps, problems, state or "not in the repository index", reason)


__all__ = ["ensemble_graph"]
