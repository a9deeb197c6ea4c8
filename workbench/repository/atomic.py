"""Crash-safe file writes inside a model repository.

A poll-mode server (ours or real Triton) may read a model folder at any moment; a file written
in place can be seen half-written. Writing a hidden temporary file next to the target and
renaming it over the target makes every reader see either the old or the new content.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from workbench._types import StrPath

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
