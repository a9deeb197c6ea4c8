"""``MANIFEST.json``: what the production repository holds and why.

Per model and version: every file's SHA-256, where it came from, the config diff against the
source file (and against the config it replaced), the sweep evidence that justified the
config, and the workbench and Triton versions; a promote into a repository that already has a
manifest keeps the earlier entries and appends to ``promotions``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.bench.plan import apply_settings
from workbench.bench.result import PartialSweepWarning, SaturatedHostWarning
from workbench.config import to_pbtxt
from workbench.errors import WorkbenchError

FORMAT = "triton-workbench-manifest/1"


def sweep_evidence(result: Any, exported: ModelConfig) -> dict[str, Any]:
    """The best point of a finished sweep (a ``SweepResult``), and whether the exported
    config carries its settings. What ``best()`` warns about is recorded instead (``host_cpu``,
    ``partial``): the user was told when they read the sweep, and a warning from here would
    point at this line rather than theirs."""
    if getattr(result, "running", False):
        return {"note": "the sweep was still running; no evidence recorded"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SaturatedHostWarning)
            warnings.simplefilter("ignore", PartialSweepWarning)
            best = result.best()
    except WorkbenchError as exc:
        return {"note": f"no usable sweep point: {exc}"}
    applied = to_pbtxt(apply_settings(exported, best.settings)) == to_pbtxt(exported)
    metrics = {
        key: _number(best.metrics.get(key))
        for key in ("throughput", "p50_ms", "p99_ms", "host_cpu")
    }
    return {
        "settings": dict(best.settings),
        "concurrency": best.concurrency,
        **metrics,
        "protocol": result.options.get("protocol"),
        "duration_s": result.options.get("duration_s"),
        "points": len(result.rows),
        "planned": result.planned,
        "partial": bool(result.partial),
        "applied": applied,
    }


def _number(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else round(number, 4)


def model_entry(
    *,
    source_dir: str,
    backend: str,
    config_sha256: str,
    files: Mapping[str, str],
    versions: Mapping[int, Mapping[str, Any]],
    config_diff: str,
    previous_config_diff: str | None,
    removed_parameters: list[str],
    sweep: dict[str, Any] | None,
) -> dict[str, Any]:
    """One model's entry; ``versions`` maps destination versions to their details."""
    return {
        "source_path": source_dir,
        "backend": backend,
        "config_sha256": config_sha256,
        "files": dict(sorted(files.items())),
        "versions": {str(v): dict(detail) for v, detail in sorted(versions.items())},
        "config_diff": config_diff,
        "previous_config_diff": previous_config_diff,
        "removed_parameters": removed_parameters,
        "sweep": sweep,
    }


def build_manifest(
    previous: Mapping[str, Any],
    entries: Mapping[str, dict[str, Any]],
    *,
    source: str,
    created: str,
    workbench_version: str,
    triton: Mapping[str, Any],
) -> dict[str, Any]:
    """The new manifest: ``previous`` (the destination's, maybe empty) updated by ``entries``."""
    models: dict[str, Any] = dict(previous.get("models", {})) if previous else {}
    for name, entry in entries.items():
        older = models.get(name, {}).get("versions", {})
        merged = {**older, **entry["versions"]}
        models[name] = {**entry, "versions": dict(sorted(merged.items(), key=lambda i: int(i[0])))}
    promotions = list(previous.get("promotions", [])) if previous else []
    promotions.append(
        {
            "created": created,
            "source": source,
            "models": {name: sorted(entry["versions"]) for name, entry in entries.items()},
        }
    )
    return {
        "format": FORMAT,
        "created": created,
        "workbench_version": workbench_version,
        "triton": dict(triton),
        "models": dict(sorted(models.items())),
        "promotions": promotions,
    }


__all__ = ["FORMAT", "build_manifest", "model_entry", "sweep_evidence"]
