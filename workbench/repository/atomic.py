"""Crash-safe file writes inside a model repository.

A poll-mode server (ours or real Triton) may read a model folder at any moment; a file written
in place can be seen half-written. Writing a hidden temporary file next to the target and
renaming it over the target makes every reader see either the old or the new content.

``keep_backup`` keeps the earlier versions of a file next to it, hidden (``.config.pbtxt.<UTC
time>.bak``): hidden names are skipped by repository fingerprints and by export, and a file,
unlike a ``.history/`` folder, cannot become the "first version folder" in which Triton's
``AutoCompleteBackendFields`` (and ``config.platforms.backend_from_files``) look for the model
file: ``.`` sorts before every digit.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from workbench._types import StrPath

#: how many earlier versions of a file ``keep_backup`` keeps
BACKUP_HISTORY = 10

_STAMP = "%Y%m%dT%H%M%S%fZ"

_O_BINARY: int = getattr(os, "O_BINARY", 0)  # Windows only; text mode would mangle bytes


def atomic_write(path: StrPath, data: bytes | str) -> Path:
    """Replace ``path`` with ``data`` atomically and durably; returns the path.

    ``str`` data is written as UTF-8. The temporary file lives in the target's folder (so the
    rename never crosses file systems) and starts with a dot, so repository fingerprints skip it.
    An existing file keeps its permission bits; a new one gets the usual umask-based mode.
    """
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    tmp_name = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    # O_EXCL with mode 0o666 lets the kernel apply the umask, as for any new file.
    fd = os.open(tmp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o666)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(payload)
            tmp.flush()
            os.fsync(tmp.fileno())
        _copy_mode(target, tmp_name)
        os.replace(tmp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_directory(target.parent)
    return target


def _copy_mode(target: Path, tmp_name: Path) -> None:
    """Give the new file the permission bits of the file it replaces, if there is one."""
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        return
    os.chmod(tmp_name, mode)


def _fsync_directory(directory: Path) -> None:
    """Persist the rename itself; not every platform can open a directory, so best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Backup:
    """One earlier version of a file, kept by ``keep_backup``."""

    path: Path
    #: when it was replaced (UTC)
    saved_at: datetime


def keep_backup(
    path: StrPath, *, keep: int = BACKUP_HISTORY, now: datetime | None = None
) -> Backup:
    """Copy ``path`` (atomically) to a hidden, timestamped file next to it and delete all but
    the newest ``keep`` such copies; returns the new one."""
    source = Path(path)
    saved_at = now or datetime.now(timezone.utc)
    target = _backup_path(source, saved_at)
    while target.exists():  # two saves within one microsecond
        saved_at += timedelta(microseconds=1)
        target = _backup_path(source, saved_at)
    atomic_write(target, source.read_bytes())
    for old in backups(source)[keep:]:
        with contextlib.suppress(FileNotFoundError):
            old.path.unlink()
    return Backup(target, saved_at)


def backups(path: StrPath) -> list[Backup]:
    """The copies ``keep_backup`` kept of ``path``, newest first."""
    source = Path(path)
    pattern = re.compile(re.escape(f".{source.name}.") + r"(\d{8}T\d{12}Z)\.bak")
    found = []
    for entry in source.parent.iterdir():
        match = pattern.fullmatch(entry.name)
        if match:
            stamp = datetime.strptime(match.group(1), _STAMP).replace(tzinfo=timezone.utc)
            found.append(Backup(entry, stamp))
    return sorted(found, key=lambda backup: backup.saved_at, reverse=True)


def _backup_path(source: Path, saved_at: datetime) -> Path:
    stamp = saved_at.astimezone(timezone.utc).strftime(_STAMP)
    return source.with_name(f".{source.name}.{stamp}.bak")
