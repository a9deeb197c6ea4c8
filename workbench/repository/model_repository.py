"""The on-disk model repository: one or more roots, each holding one folder per model.

Mirrors Triton's ``ModelRepositoryManager`` (``core/src/model_repository_manager``): model
folders found across every ``--model-repository`` root, ``config.pbtxt`` or the custom
``configs/<name>.pbtxt`` of ``--model-config-name``, numeric version folders, and the
temporary folders of a load with ``file:`` overrides. Every call reads the disk afresh, so the
poll loop and explicit loads always see the current state.

A root may be remote (``s3://``, ``gs://``, ``as://``, as Triton accepts them): it is copied
into a local mirror when the repository opens (``remote_mirror.py``), brought up to date by
each ``snapshot()`` (the poll loop) and per model by ``refresh()`` (explicit loads), and
deleted by ``close()``; every other method reads the mirror like any local root.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import StrPath
from workbench.errors import (
    AlreadyExistsError,
    ConfigError,
    InvalidArgumentError,
    NotFoundError,
    WorkbenchError,
)
from workbench.repository import _override, poll, versions
from workbench.repository.remote_mirror import RemoteMirror
from workbench.repository.remote_url import parse_remote_url

log = logging.getLogger("workbench.repository")

CONFIG_FILENAME = "config.pbtxt"
CUSTOM_CONFIG_FOLDER = "configs"


class ModelRepository:
    """Models stored under one or more repository roots (Triton's ``--model-repository``)."""

    def __init__(self, paths: StrPath | Sequence[StrPath]) -> None:
        raw = [paths] if isinstance(paths, str) or not isinstance(paths, Sequence) else paths
        if not raw:
            raise InvalidArgumentError("at least one model repository path is required")
        #: remote roots by URL, each with its local copy
        self._mirrors: dict[str, RemoteMirror] = {}
        roots: list[Path] = []
        try:
            for path in raw:
                root = self._local_root(path)
                if root not in roots:  # Triton keeps its repository paths in a set
                    roots.append(root)
        except BaseException:
            self.close()  # the copies of remote roots opened before the failing one
            raise
        self._roots = tuple(roots)

    def _local_root(self, path: StrPath) -> Path:
        """The folder to read for one repository path; a remote one is copied there first."""
        url = parse_remote_url(path)
        if url is not None:
            if url.url not in self._mirrors:
                self._mirrors[url.url] = RemoteMirror.open(url)
            return self._mirrors[url.url].local_root
        root = Path(path).expanduser().resolve()
        if not root.is_dir():
            raise NotFoundError(
                f"model repository path '{path}' does not exist or is not a directory"
            )
        return root

    @property
    def roots(self) -> tuple[Path, ...]:
        """The repository roots, absolute, in the order given (duplicates dropped)."""
        return self._roots

    @property
    def remote_urls(self) -> tuple[str, ...]:
        """The remote roots (``s3://...``) among the paths given, as given."""
        return tuple(self._mirrors)

    def __repr__(self) -> str:
        remote = {mirror.local_root: url for url, mirror in self._mirrors.items()}
        return f"ModelRepository({[remote.get(root, str(root)) for root in self._roots]!r})"

    def refresh(self, name: str) -> None:
        """Copy model ``name``'s folder afresh from the remote roots, as Triton copies a
        remote model for each load (explicit loads); nothing to do for local roots.

        Raises ``UnavailableError``/``NotFoundError`` when a remote root cannot be read.
        """
        if not self._mirrors:
            return
        validate_model_name(name)
        for mirror in self._mirrors.values():
            mirror.sync(name, fresh=True)

    def close(self) -> None:
        """Delete the local copies of remote roots (the server does at stop); idempotent."""
        for mirror in self._mirrors.values():
            mirror.close()

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is a model that can load (found in exactly one root)."""
        if not isinstance(name, str):
            return False
        try:
            validate_model_name(name)
        except InvalidArgumentError:
            return False
        return len(self._locations(name)) == 1

    def model_names(self) -> list[str]:
        """Every model folder name across all roots, sorted (duplicates included once).

        Hidden folders and plain files are not models. A name found in several roots is
        listed but cannot load; see ``duplicates()``.
        """
        return sorted({entry.name for root in self._roots for entry in _model_folders(root)})

    def duplicates(self) -> dict[str, list[Path]]:
        """Models found in more than one root, with their folders (Triton won't load them)."""
        found: dict[str, list[Path]] = {}
        for root in self._roots:
            for entry in _model_folders(root):
                found.setdefault(entry.name, []).append(entry)
        return {name: paths for name, paths in sorted(found.items()) if len(paths) > 1}

    def model_path(self, name: str) -> Path:
        """The folder of model ``name``.

        Raises ``NotFoundError`` (Triton's load error text) when no root has it and
        ``AlreadyExistsError`` when several roots do.
        """
        validate_model_name(name)
        locations = self._locations(name)
        if not locations:
            raise NotFoundError(f"failed to load '{name}', failed to poll from model repository")
        if len(locations) > 1:
            listed = ", ".join(f"'{path.parent}'" for path in locations)
            raise AlreadyExistsError(
                f"failed to poll model '{name}': not unique across all model repositories "
                f"(found in {listed})"
            )
        return locations[0]

    def config_path(self, name: str, *, config_name: str | None = None) -> Path:
        """The config file Triton would read for ``name``; see ``config_path_at``."""
        return config_path_at(self.model_path(name), config_name=config_name)

    def read_config(self, name: str, *, config_name: str | None = None) -> ModelConfig | None:
        """The parsed config of ``name``, or ``None`` without a file; see ``read_config_at``."""
        return self.read_config_at(self.model_path(name), config_name=config_name)

    @staticmethod
    def read_config_at(model_dir: Path, *, config_name: str | None = None) -> ModelConfig | None:
        """The parsed config of the model folder ``model_dir`` (in a root or an override).

        ``None`` when there is no config file: not an error here, since Triton may still
        auto-complete the config, which the caller decides. A file that does not parse raises
        ``ConfigError`` naming ``file:line:col``.
        """
        path = config_path_at(model_dir, config_name=config_name)
        try:
            # Bytes that are not UTF-8 do not stop Triton (protobuf's C++ text parser takes
            # them in comments and in string values alike, and the model loads): here they
            # become U+FFFD, since a protobuf string in Python holds only valid Unicode.
            text = path.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return None
        return _parse(text, str(path))

    def available_versions(self, name: str) -> list[int]:
        """The numeric version folders of ``name``, ascending (Triton's naming rules)."""
        return versions.version_folders(self.model_path(name))

    @staticmethod
    def available_versions_at(model_dir: Path) -> list[int]:
        """The numeric version folders of the model folder ``model_dir``, ascending."""
        return versions.version_folders(Path(model_dir))

    #: ``select_versions(config, available, *, model_name="")``, also exported as a function.
    select_versions = staticmethod(versions.select_versions)

    def fingerprint(self, name: str) -> str:
        """A cheap digest of the model folder (paths, sizes, mtimes) for poll mode."""
        return poll.fingerprint(self.model_path(name))

    def snapshot(self) -> dict[str, str]:
        """``{name: fingerprint}`` for every loadable model; compare with ``diff_snapshots``.

        Models found in several roots are left out, so poll mode unloads them as Triton does.
        Remote roots are synced first; one that cannot be read keeps its last copy (logged).
        """
        self._sync_mirrors()
        shadowed = self.duplicates()
        snapshot: dict[str, str] = {}
        for root in self._roots:
            for entry in _model_folders(root):
                if entry.name not in shadowed:
                    snapshot[entry.name] = poll.fingerprint(entry)
        return dict(sorted(snapshot.items()))

    def write_override(
        self,
        name: str,
        *,
        config: str | bytes | ModelConfig | None = None,
        files: Mapping[str, bytes] | None = None,
        config_json_or_pb: str | bytes | ModelConfig | None = None,
    ) -> Path:
        """Materialize a load with ``file:`` parameters into a temporary model folder.

        As Triton does, the files (keys are relative paths, with or without the ``file:``
        prefix) go to ``<temp>/<name>/``, never into the repository, and a ``config``
        (Triton's JSON form, or a ``ModelConfig``) is required and written as
        ``config.pbtxt``. Paths escaping the folder raise ``InvalidArgumentError``. Returns
        the folder to load from; ``remove_override`` deletes it when the model unloads.
        ``config_json_or_pb`` is an alias of ``config``.
        """
        validate_model_name(name)
        chosen = config if config is not None else config_json_or_pb
        return _override.write_override_dir(name, chosen, files or {})

    @staticmethod
    def remove_override(model_dir: Path) -> None:
        """Delete a folder made by ``write_override``; any other path is left alone."""
        _override.remove_override_dir(model_dir)

    def _sync_mirrors(self) -> None:
        for mirror in self._mirrors.values():
            try:
                mirror.sync()
            except (WorkbenchError, OSError) as exc:  # the poll goes on with the last copy
                log.warning("failed to poll model repository '%s': %s", mirror.url.url, exc)

    def _locations(self, name: str) -> list[Path]:
        if name.startswith("."):
            return []  # hidden folders are never models (see model_names)
        candidates = (root / name for root in self._roots)
        return [path for path in candidates if path.is_dir()]


def config_path_at(model_dir: Path, *, config_name: str | None = None) -> Path:
    """The config file Triton reads: ``configs/<config_name>.pbtxt`` when ``config_name`` is
    given and that file exists (``--model-config-name``), else ``config.pbtxt``; the returned
    file may not exist."""
    if config_name:
        custom = Path(model_dir) / CUSTOM_CONFIG_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return Path(model_dir) / CONFIG_FILENAME


def validate_model_name(name: str) -> None:
    """Reject names that are empty or could leave the repository (Triton's messages)."""
    if not name.strip():
        raise InvalidArgumentError(
            "Model name cannot be empty. Please enter a valid name to deploy."
        )
    if name.strip() in {".", ".."} or "/" in name or "\\" in name:
        raise InvalidArgumentError(
            f"invalid model name '{name}', model name must not contain path traversal characters"
        )


def _model_folders(root: Path) -> list[Path]:
    """Non-hidden sub-folders of a root; a root that vanished has none."""
    try:
        return [p for p in root.iterdir() if not p.name.startswith(".") and p.is_dir()]
    except FileNotFoundError:
        return []


def _parse(text: str, source: str) -> ModelConfig:
    """Parse pbtxt into a ModelConfig, errors carrying ``source:line:col``.

    Delegates to ``workbench.config.parse_pbtxt``; until that lands (it is written
    concurrently) protobuf's own text parser stands in. Replace with a plain import then.
    """
    import workbench.config as config_layer  # inside: the config layer may import atomic_write

    parse_pbtxt = getattr(config_layer, "parse_pbtxt", None)
    if parse_pbtxt is not None:
        config: ModelConfig = parse_pbtxt(text, source=source)
        return config
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as exc:
        where = f"{source}:{exc.GetLine()}:{exc.GetColumn()}" if exc.GetLine() else source
        raise ConfigError(f"{where}: {exc}") from exc
