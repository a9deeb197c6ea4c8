"""Where a promote writes: a local folder, swapped in atomically, or an fsspec URI.

Local: the new repository is built in a hidden folder next to ``dest`` (existing files
hard-linked, every written file a new inode, so ``dest`` is never touched while staging) and
exchanged with ``dest`` in one ``renameat2(RENAME_EXCHANGE)``; where the kernel lacks it, two
renames with a rollback. A promote killed while staging leaves ``dest`` as it was and a stale
stage folder, which the next promote removes. A file lock serialises promotes to one ``dest``.

URI (``s3://``, ``gs://``, ``memory://`` ... through ``fsspec``): object stores have no atomic
folder rename, so new version folders are uploaded under numbers nobody serves yet, then the
configs, then ``MANIFEST.json`` last; an interrupted upload can leave unreferenced version
folders but never changes a file that was there.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol

from workbench._process import process_alive
from workbench.errors import InvalidArgumentError, MissingDependencyError
from workbench.repository.versions import version_folders

MANIFEST_NAME = "MANIFEST.json"
_STAGE_MARK = ".promote-"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class Destination(Protocol):
    """What ``promote`` needs from where it writes."""

    #: a local folder holding the staged repository (the whole new one, or only what changes)
    stage: Path
    display: str

    def versions(self, name: str) -> list[int]: ...

    def read_text(self, relative: str) -> str | None: ...

    def commit(self) -> None: ...

    def discard(self) -> None: ...


def open_destination(dest: str | os.PathLike[str]) -> Destination:
    """A ``LocalDestination`` for a path or ``file://`` URI, else an ``FsspecDestination``."""
    text = os.fspath(dest)
    if "://" not in text:
        return LocalDestination(Path(text))
    protocol, _, rest = text.partition("://")
    if protocol == "file":
        return LocalDestination(Path(rest))
    return FsspecDestination(text)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


class LocalDestination:
    """A local repository folder, replaced atomically on ``commit``."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest.expanduser().absolute()
        self.display = str(self.dest)
        if self.dest.exists() and not self.dest.is_dir():
            raise InvalidArgumentError(f"promote destination '{dest}' is a file, not a folder")
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.dest.parent / f".{self.dest.name}.promote.lock", "w")  # noqa: SIM115
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        _remove_stale_stages(self.dest)
        prefix = f".{self.dest.name}{_STAGE_MARK}{os.getpid()}-"
        self.stage = Path(tempfile.mkdtemp(prefix=prefix, dir=self.dest.parent))
        if self.dest.is_dir():
            shutil.copytree(self.dest, self.stage, copy_function=_link_or_copy, dirs_exist_ok=True)

    def versions(self, name: str) -> list[int]:
        folder = self.dest / name
        return version_folders(folder) if folder.is_dir() else []

    def read_text(self, relative: str) -> str | None:
        try:
            return (self.dest / relative).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def commit(self) -> None:
        """Put the staged repository in place of ``dest`` in one step."""
        os.chmod(self.stage, 0o755)
        if not self.dest.exists():
            os.rename(self.stage, self.dest)
        elif not _exchange(self.stage, self.dest):
            _swap_with_rollback(self.stage, self.dest)
        self.discard()  # the stage path now holds the previous repository

    def discard(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)
        if not self._lock.closed:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2``); False where that is not available."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    result = renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _swap_with_rollback(stage: Path, dest: Path) -> None:
    backup = stage.with_name(stage.name + ".previous")
    os.rename(dest, backup)
    try:
        os.rename(stage, dest)
    except OSError:
        os.rename(backup, dest)
        raise
    os.rename(backup, stage)


def _remove_stale_stages(dest: Path) -> None:
    """Stage folders of promotes whose process is gone (killed mid-way)."""
    for entry in dest.parent.glob(f".{dest.name}{_STAGE_MARK}*"):
        pid_text = entry.name[len(f".{dest.name}{_STAGE_MARK}") :].split("-", 1)[0]
        if entry.is_dir() and pid_text.isdigit() and not process_alive(int(pid_text)):
            shutil.rmtree(entry, ignore_errors=True)


class FsspecDestination:
    """A repository at an fsspec URI; only the new content is staged and then uploaded."""

    def __init__(self, uri: str) -> None:
        try:
            import fsspec
        except ImportError:
            raise MissingDependencyError("fsspec", "fsspec") from None
        self.fs: Any
        self.fs, self.root = fsspec.core.url_to_fs(uri)
        self.root = self.root.rstrip("/")
        self.display = uri
        self.stage = Path(tempfile.mkdtemp(prefix="workbench-promote-"))

    def versions(self, name: str) -> list[int]:
        path = f"{self.root}/{name}"
        if not self.fs.isdir(path):
            return []
        names = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in self.fs.ls(path, detail=False)]
        return sorted(int(n) for n in names if n.isdigit() and self.fs.isdir(f"{path}/{n}"))

    def read_text(self, relative: str) -> str | None:
        path = f"{self.root}/{relative}"
        if not self.fs.isfile(path):
            return None
        data: bytes = self.fs.cat_file(path)
        return data.decode("utf-8")

    def commit(self) -> None:
        """Upload: version folders, then the rest, then ``MANIFEST.json``."""
        files = sorted(p for p in self.stage.rglob("*") if p.is_file())
        last = [p for p in files if p.name == MANIFEST_NAME and p.parent == self.stage]

        def rank(path: Path) -> int:
            parts = path.relative_to(self.stage).parts
            return 0 if len(parts) > 2 and parts[1].isdigit() else 1

        for path in sorted((p for p in files if p not in last), key=rank) + last:
            relative = path.relative_to(self.stage).as_posix()
            self.fs.makedirs(f"{self.root}/{relative}".rsplit("/", 1)[0], exist_ok=True)
            self.fs.pipe_file(f"{self.root}/{relative}", path.read_bytes())
        self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.stage, ignore_errors=True)


def read_manifest(destination: Destination) -> dict[str, Any]:
    """The destination's current ``MANIFEST.json`` (empty when there is none or it is broken)."""
    text = destination.read_text(MANIFEST_NAME)
    if text is None:
        return {}
    with contextlib.suppress(ValueError):
        data = json.loads(text)
        if isinstance(data, dict):
            return data
    return {}


__all__ = [
    "MANIFEST_NAME",
    "Destination",
    "FsspecDestination",
    "LocalDestination",
    "open_destination",
    "read_manifest",
]
