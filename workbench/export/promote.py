"""``promote()``: export tuned models into a production repository real Triton serves as is.

The order matters for safety: everything that can refuse (selection, version conflicts,
options) does so before a byte is written; the export is staged, verified on real Triton while
still staged, and only then committed (see ``workbench.export.destination``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import StrPath
from workbench._version import __version__
from workbench.config import backend_name, read_config
from workbench.config.platforms import EXECUTION_ENV_PARAMETER, MODEL_DIRECTORY_KEYWORD
from workbench.errors import InternalError, InvalidArgumentError
from workbench.export.destination import (
    MANIFEST_NAME,
    Destination,
    open_destination,
    read_manifest,
)
from workbench.export.manifest import build_manifest, model_entry, sweep_evidence
from workbench.export.model_files import copy_model_files, file_sha256
from workbench.export.output_match import DEFAULT_TOLERANCE, Tolerance
from workbench.export.production_config import (
    check_version_policy,
    config_diff,
    exported_text,
    production_config,
    renumber,
    workbench_parameters,
)
from workbench.export.report import REPORT_NAME, PromotedModel, PromoteReport
from workbench.export.selection import Versions, ready_versions, select_models
from workbench.export.tritonserver import (
    BINARY_ENV,
    NGC_TAG,
    TRITON_VERSION,
    TritonBinary,
    find_tritonserver,
)
from workbench.export.verify import Inputs, VerifyTarget, verify_export
from workbench.repository.atomic import atomic_write
from workbench.repository.versions import version_folders

DEPLOY_TARGETS = (None, "kubernetes")


class PromoteVerificationError(InternalError):
    """Real Triton disagreed with the workbench; nothing was written. ``report`` says where."""

    def __init__(self, report: PromoteReport) -> None:
        bad = [c for c in report.checks if c.status in ("mismatch", "failed")]
        details = "; ".join(f"{c.model}: {c.status}: {c.detail}" for c in bad)
        super().__init__(
            f"promote to {report.dest} refused, real Triton disagrees: {details} "
            "(verify='warn' promotes anyway)"
        )
        self.report = report


@dataclass
class _Staged:
    """What staging produced: manifest entries, report rows and verification targets."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    models: list[PromotedModel] = field(default_factory=list)
    targets: list[VerifyTarget] = field(default_factory=list)
    #: what the report should tell about the staged models
    notes: list[str] = field(default_factory=list)


def promote(
    repository: StrPath,
    dest: StrPath,
    *,
    models: Sequence[str] | None = None,
    versions: Versions = "latest",
    on_conflict: str = "new_version",
    version_policy: str | int = "keep",
    verify: bool | str | None = None,
    server_address: str | None = None,
    index: Sequence[Mapping[str, Any]] | None = None,
    requests: Mapping[str, Sequence[Inputs]] | None = None,
    sweeps: Mapping[str, Any] | None = None,
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    deploy: str | None = None,
    deploy_dir: StrPath | None = None,
    tritonserver: StrPath | None = None,
) -> PromoteReport:
    """Export models of ``repository`` into the production repository ``dest``.

    ``models``: default every READY model in ``index`` (the server's repository index; every
    model folder without one), ensembles with their composing models. ``on_conflict``:
    ``"new_version"`` (a model already at ``dest`` gets the next version numbers) or
    ``"refuse"``. ``version_policy``: ``"keep"``, ``"latest"``, ``"all"``, ``"specific"`` or N.
    ``verify``: None = on real Triton when a tritonserver is found; True requires it; "warn"
    reports a mismatch instead of refusing; False skips it. The workbench side of the check is
    ``server_address`` (``host:port``), else an embedded server started for the occasion.
    ``requests`` are recorded inputs per model to replay; ``sweeps`` the ``SweepResult`` per
    model whose best point the manifest records. ``deploy="kubernetes"`` also writes
    manifests to ``deploy_dir`` (default: ``deploy/`` next to ``dest``).
    """
    _check_options(on_conflict, version_policy, verify, deploy)
    source = Path(repository).resolve()
    ready = ready_versions(index) if index is not None else _on_disk(source)
    selected = select_models(source, ready, models, versions)
    binary = _binary_for(verify, tritonserver)
    destination = open_destination(dest)
    try:
        maps = {
            name: renumber(name, chosen, destination.versions(name), on_conflict)
            for name, chosen in selected.items()
        }
        staged = _stage(source, destination, maps, version_policy, sweeps or {})
        report = _report(source, destination, staged, verify, binary)
        if binary is not None:
            _verify(report, staged, destination, binary, server_address, requests, tolerance)
        if not report.ok and verify != "warn":
            raise PromoteVerificationError(report)
        _finish(report, destination, staged, deploy, deploy_dir, dest)
    except BaseException:
        destination.discard()
        raise
    return report


def _check_options(on_conflict: str, policy: str | int, verify: Any, deploy: Any) -> None:
    renumber("", [], [], on_conflict)  # validates the name only
    check_version_policy(policy)
    if not (verify is None or isinstance(verify, bool) or verify == "warn"):
        raise InvalidArgumentError(f"verify must be True, False, 'warn' or None, got {verify!r}")
    if deploy not in DEPLOY_TARGETS:
        raise InvalidArgumentError(f"deploy must be None or 'kubernetes', got {deploy!r}")


def _on_disk(source: Path) -> dict[str, list[int]]:
    models = sorted(p.parent.name for p in source.glob("*/config.pbtxt"))
    return {name: version_folders(source / name) for name in models}


def _binary_for(verify: Any, tritonserver: StrPath | None) -> TritonBinary | None:
    if verify is False:
        return None
    if verify is None:
        with contextlib.suppress(Exception):
            return find_tritonserver(tritonserver)
        return None
    return find_tritonserver(tritonserver)  # verify=True/"warn": not finding one is an error


def _stage(
    source: Path,
    destination: Destination,
    maps: Mapping[str, Mapping[int, int]],
    version_policy: str | int,
    sweeps: Mapping[str, Any],
) -> _Staged:
    staged = _Staged()
    for name, version_map in maps.items():
        original_text = (source / name / "config.pbtxt").read_text(encoding="utf-8")
        original = read_config(source / name / "config.pbtxt")
        config = production_config(
            original,
            name,
            version_map=version_map,
            step_version_maps=maps,
            version_policy=version_policy,
        )
        text = exported_text(config)
        target = destination.stage / name
        files, version_files = copy_model_files(source / name, target, version_map)
        atomic_write(target / "config.pbtxt", text)
        previous = destination.read_text(f"{name}/config.pbtxt")
        sweep = sweeps.get(name)
        staged.entries[name] = model_entry(
            source_dir=str(source / name),
            backend=backend_name(config),
            config_sha256=file_sha256(target / "config.pbtxt"),
            files=files,
            versions={
                dest: {"source_version": src, "files": version_files[dest]}
                for src, dest in version_map.items()
            },
            config_diff=config_diff(
                original_text, text, name, before_label="source", after_label="promoted"
            ),
            previous_config_diff=None
            if previous is None
            else config_diff(previous, text, name, before_label="replaced", after_label="promoted"),
            removed_parameters=workbench_parameters(original),
            sweep=None if sweep is None else sweep_evidence(sweep, config),
        )
        action = "new version" if destination.versions(name) else "added"
        staged.models.append(
            PromotedModel(
                name, backend_name(config), dict(version_map), action,
                workbench_parameters(original),
            )
        )  # fmt: skip
        newest = max(version_map)
        staged.targets.append(VerifyTarget(name, newest, version_map[newest], config))
        staged.notes += environment_notes(name, config)
    return staged


def environment_notes(name: str, config: ModelConfig) -> list[str]:
    """A python model's ``EXECUTION_ENV_PATH`` outside its folder does not travel with the
    export: production's Triton must find it at the same path."""
    parameter = config.parameters.get(EXECUTION_ENV_PARAMETER)
    path = parameter.string_value if parameter is not None else ""
    if not path or path.startswith(MODEL_DIRECTORY_KEYWORD):
        return []
    return [
        f"model '{name}': {EXECUTION_ENV_PARAMETER} '{path}' is outside the model folder and "
        "was not exported; Triton needs that environment at that path (or put it in the model "
        f"folder and name it '{MODEL_DIRECTORY_KEYWORD}/...')"
    ]


def _report(
    source: Path, destination: Destination, staged: _Staged, verify: Any, binary: Any
) -> PromoteReport:
    mode = "off" if verify is False else ("warn" if verify == "warn" else "strict")
    report = PromoteReport(
        dest=destination.display,
        source=str(source),
        models=staged.models,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        verify_mode=mode if binary is not None or verify is not None else "no tritonserver",
    )
    if binary is None and verify is None:
        report.notes.append(
            f"not verified: no tritonserver binary found (set ${BINARY_ENV}, or pip install "
            "nvidia-pytriton)"
        )
    if binary is not None:
        report.notes += list(binary.problems)
    report.notes += staged.notes
    return report


def _verify(
    report: PromoteReport,
    staged: _Staged,
    destination: Destination,
    binary: TritonBinary,
    server_address: str | None,
    requests: Mapping[str, Sequence[Inputs]] | None,
    tolerance: Tolerance,
) -> None:
    with _workbench_side(Path(report.source), staged, server_address) as address:
        checks, version = verify_export(
            destination.stage,
            staged.targets,
            source_address=address,
            binary=binary,
            requests=requests,
            tolerance=tolerance,
        )
    report.triton_version = version
    for model, check in zip(staged.models, checks, strict=True):
        model.check = check


@contextlib.contextmanager
def _workbench_side(source: Path, staged: _Staged, address: str | None) -> Iterator[str]:
    """The workbench server to compare with: the caller's, or one started here."""
    if address is not None:
        yield address
        return
    from workbench.server.hosting import Server

    names = [model.model for model in staged.models]
    server = Server(
        source, http_port=0, grpc_port=0, metrics_port=0,
        model_control_mode="explicit", load_model=names,
    )  # fmt: skip
    with server:
        yield server.http_address


def _finish(
    report: PromoteReport,
    destination: Destination,
    staged: _Staged,
    deploy: str | None,
    deploy_dir: StrPath | None,
    dest: StrPath,
) -> None:
    manifest = build_manifest(
        read_manifest(destination),
        staged.entries,
        source=report.source,
        created=report.created,
        workbench_version=__version__,
        triton={
            "schema_version": TRITON_VERSION,
            "image": f"nvcr.io/nvidia/tritonserver:{NGC_TAG}-py3",
            "verified_with": report.triton_version or None,
            "verification": {m.model: m.check.status for m in staged.models if m.check},
        },
    )
    import json

    atomic_write(destination.stage / MANIFEST_NAME, json.dumps(manifest, indent=1))
    report.manifest = f"{destination.display.rstrip('/')}/{MANIFEST_NAME}"
    if deploy == "kubernetes":
        from workbench.export.kubernetes import write_kubernetes

        folder = Path(deploy_dir) if deploy_dir is not None else _default_deploy_dir(dest)
        configs = [t.config for t in staged.targets]
        report.deploy_files = [
            str(p) for p in write_kubernetes(folder, destination.display, configs)
        ]
    report.committed = True
    report.save(destination.stage / REPORT_NAME)
    destination.commit()


def _default_deploy_dir(dest: StrPath) -> Path:
    text = str(dest)
    if "://" in text and not text.startswith("file://"):
        return Path.cwd() / "deploy"
    return Path(text.removeprefix("file://")).expanduser().absolute().parent / "deploy"


__all__ = ["DEPLOY_TARGETS", "PromoteVerificationError", "promote"]
