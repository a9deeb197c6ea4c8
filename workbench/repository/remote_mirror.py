"""A local copy of a remote model repository, kept in step with it.

Triton 2.51 copies a remote model into a temporary folder before loading it (``LocalizePath``
in ``core/src/filesystem/implementations/s3.h``: a ``folderXXXXXX`` under
``TRITON_AWS_MOUNT_DIRECTORY`` or ``/tmp``, deleted when done). Here one mirror folder per
remote root holds the repository, so that everything above this module (``ModelRepository``,
the poll loop, the backends) sees an ordinary local folder. A sync lists the remote objects
once and downloads only those whose ETag (or generation, size and modification time) changed,
each swapped in by rename, and removes what is gone remotely: the poll fingerprint of the
local folder then changes exactly when the remote one did.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path, PurePosixPath
from typing import Any

from workbench.errors import NotFoundError, UnavailableError
from workbench.repository.remote_fs import (
    MOUNT_DIRECTORY_VARIABLES,
    describe_failure,
    open_filesystem,
)
from workbench.repository.remote_url import RemoteUrl

log = logging.getLogger("workbench.repository")

#: folders the server writes into a model folder itself (``model.py``'s bytecode) and hidden
#: ones: never remote content, so a sync leaves them alone
_LOCAL_ONLY = frozenset({"__pycache__"})


#: how long ``close`` waits for a sync under way
CLOSE_WAIT_S = 30.0


class RemoteMirror:
    """One remote repository root copied into a local folder; see ``open``."""

    def __init__(self, url: RemoteUrl, fs: Any, local_root: Path) -> None:
        self.url = url
        self.local_root = local_root
        self._fs = fs
        self._lock = threading.Lock()
        #: set by ``close``: a sync that starts later does nothing
        self._closed = False
        #: relative file path → the remote object's stamp when it was downloaded
        self._stamps: dict[str, str] = {}
        #: relative folders present remotely as "folder/" marker objects (console-made)
        self._markers: set[str] = set()
        # removed at close(), else when the mirror is collected or the interpreter exits
        self._cleanup = weakref.finalize(self, shutil.rmtree, local_root, ignore_errors=True)

    @classmethod
    def open(cls, url: RemoteUrl, fs: Any = None) -> RemoteMirror:
        """Check that ``url`` can be read and copy it into a new temporary folder.

        The folder is made under Triton's ``TRITON_{AWS,GCS,AZURE}_MOUNT_DIRECTORY`` when set.
        Raises ``NotFoundError`` for a missing bucket or path, ``UnavailableError`` (naming
        where credentials come from) when the store cannot be read, ``MissingDependencyError``
        when the back end is not installed.
        """
        fs = open_filesystem(url) if fs is None else fs
        parent = os.environ.get(MOUNT_DIRECTORY_VARIABLES[url.scheme]) or None
        local_root = Path(tempfile.mkdtemp(prefix=f"workbench-{url.scheme}-", dir=parent))
        mirror = cls(url, fs, local_root)
        try:
            mirror.sync()
        except BaseException:
            mirror.close()
            raise
        return mirror

    def sync(self, model: str | None = None, *, fresh: bool = False) -> None:
        """Bring the copy (or only ``model``'s folder) in step with the remote store.

        ``fresh`` downloads every object again, as Triton does for each load.
        """
        with self._lock:
            if self._closed:  # a poll's sync that lost the race with the server's stop
                return
            try:
                self._sync(model, fresh)
            finally:
                if self._closed:  # close() gave up waiting for this sync: delete its files
                    shutil.rmtree(self.local_root, ignore_errors=True)

    def _sync(self, model: str | None, fresh: bool) -> None:
        """``sync``, under its lock."""
        files, markers = self._list(model)
        scope = f"{model}/" if model else ""
        self._markers = {m for m in self._markers if not f"{m}/".startswith(scope)} | markers
        for marker in markers:
            (self.local_root / marker).mkdir(parents=True, exist_ok=True)
        stale = [
            relative
            for relative, stamp in files.items()
            if fresh
            or self._stamps.get(relative) != stamp
            or not (self.local_root / relative).is_file()
        ]
        self._download(stale)
        self._stamps.update({relative: files[relative] for relative in stale})
        for relative in [r for r in self._stamps if r.startswith(scope) and r not in files]:
            (self.local_root / relative).unlink(missing_ok=True)
            del self._stamps[relative]
        self._prune(model)

    def close(self) -> None:
        """Delete the local copy (Triton deletes its copies when it stops), once a sync under
        way has ended (a poll's runs on a worker thread, which cancelling the poll does not
        stop: deleting under it would leave the files it writes next). A sync that does not
        end within ``CLOSE_WAIT_S`` (a store that stopped answering) is not waited for."""
        self._closed = True
        acquired = self._lock.acquire(timeout=CLOSE_WAIT_S)
        try:
            self._cleanup()
        finally:
            if acquired:
                self._lock.release()

    # -- listing -------------------------------------------------------------------------------
    def _list(self, model: str | None) -> tuple[dict[str, str], set[str]]:
        """``{relative path: stamp}`` of the remote files in scope, and the folder markers."""
        root = self.url.fs_path
        path = f"{root}/{model}" if model else root
        try:
            self._fs.invalidate_cache()  # fsspec caches listings: a poll must see new objects
            found: dict[str, dict[str, Any]] = self._fs.find(path, detail=True)
            if not found and model is None and not self._stamps:
                self._check_root()
        except FileNotFoundError as exc:
            raise self._missing_bucket(str(exc)) from exc
        except NotFoundError:
            raise
        except Exception as exc:  # noqa: BLE001 - every back end has its own error classes
            raise UnavailableError(describe_failure(self.url, exc)) from exc
        files: dict[str, str] = {}
        markers: set[str] = set()
        for name, info in found.items():
            relative = _relative(root, name)
            if relative is None:
                continue
            if relative.endswith("/"):
                markers.add(relative.rstrip("/"))
            elif info.get("type", "file") == "file":
                files[relative] = _stamp(info)
        return files, markers

    def _check_root(self) -> None:
        """Raise ``NotFoundError`` when the root of an empty listing does not exist.

        Object stores have no folders: a path without objects is missing at start (and an
        emptied repository later on, its last model removed). A missing bucket lists as
        empty on some back ends (adlfs for a missing container) and raises on others.
        """
        if not self._fs.exists(self.url.bucket):
            raise self._missing_bucket("it does not exist")
        if self.url.prefix:
            raise NotFoundError(
                f"model repository path '{self.url.url}' does not exist or is not a directory"
            )

    def _missing_bucket(self, detail: str) -> NotFoundError:
        kind = "container" if self.url.scheme == "as" else "bucket"
        return NotFoundError(
            f"model repository path '{self.url.url}' does not exist: {kind} "
            f"'{self.url.bucket}' not found ({detail})"
        )

    # -- local copy ----------------------------------------------------------------------------
    def _download(self, relatives: list[str]) -> None:
        """Fetch each file next to its place, then rename it in (a reader never sees half)."""
        if not relatives:
            return
        targets = [self.local_root / relative for relative in relatives]
        partials = [target.with_name(f".{target.name}.download") for target in targets]
        for target in targets:
            if target.is_dir():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
        remote = [f"{self.url.fs_path}/{relative}" for relative in relatives]
        try:
            self._fs.get(remote, [str(partial) for partial in partials])
        except Exception as exc:  # noqa: BLE001
            for partial in partials:
                partial.unlink(missing_ok=True)
            raise UnavailableError(describe_failure(self.url, exc)) from exc
        for partial, target in zip(partials, targets, strict=True):
            os.replace(partial, target)

    def _prune(self, model: str | None) -> None:
        """Remove folders that no remote file or marker keeps (a model or version removed)."""
        keep = {str(parent) for relative in self._stamps for parent in _parents(relative)}
        keep |= {str(parent) for marker in self._markers for parent in _parents(marker + "/x")}
        starts = [self.local_root / model] if model else list(self.local_root.iterdir())
        for folder in starts:
            _prune_folder(self.local_root, folder, keep)


def _prune_folder(root: Path, folder: Path, keep: set[str]) -> None:
    if folder.is_symlink() or not folder.is_dir():
        return
    if folder.name.startswith(".") or folder.name in _LOCAL_ONLY:
        return  # its parent is kept (pruning stops at a folder it removes)
    if folder.relative_to(root).as_posix() not in keep:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for child in folder.iterdir():
        _prune_folder(root, child, keep)


def _parents(relative: str) -> list[PurePosixPath]:
    """Every folder above a relative file path, e.g. ``a/1`` and ``a`` for ``a/1/model.py``."""
    return [p for p in PurePosixPath(relative).parents if str(p) != "."]


def _relative(root: str, name: str) -> str | None:
    """``name`` relative to ``root``; ``None`` for the root itself and for unsafe keys."""
    name = name.lstrip("/")
    if not name.startswith(f"{root}/"):
        return None
    relative = name[len(root) + 1 :]
    parts = relative.rstrip("/").split("/")
    if not relative or any(part in ("", ".", "..") for part in parts):
        if relative:
            log.warning("skipping remote object '%s': not a safe relative path", name)
        return None
    return relative


def _stamp(info: dict[str, Any]) -> str:
    """What identifies one version of a remote object across the back ends."""
    tag = info.get("ETag") or info.get("etag") or info.get("generation") or info.get("md5Hash")
    modified = info.get("LastModified") or info.get("updated") or info.get("last_modified")
    return f"{info.get('size')} {tag} {modified}"
