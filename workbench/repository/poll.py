"""Change detection for ``--model-control-mode=poll``.

The core owns the poll loop and its timer; this module supplies the two pure pieces it needs:
a cheap fingerprint of a model folder and the diff of two repository snapshots.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: Folder names that never count as model content: Python's bytecode cache is written by the
#: server itself when it imports ``model.py``, and counting it would reload the model forever.
_SKIPPED_NAMES = frozenset({"__pycache__"})


@dataclass(frozen=True)
class RepositoryChanges:
    """What changed between two snapshots: sorted model names in each category."""

    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.modified)


def diff_snapshots(old: Mapping[str, str], new: Mapping[str, str]) -> RepositoryChanges:
    """Compare two ``{model name: fingerprint}`` snapshots (see ``ModelRepository.snapshot``)."""
    return RepositoryChanges(
        added=sorted(new.keys() - old.keys()),
        removed=sorted(old.keys() - new.keys()),
        modified=sorted(name for name in old.keys() & new.keys() if old[name] != new[name]),
    )


def fingerprint(model_dir: Path) -> str:
    """A digest of every entry under ``model_dir``: relative path, size and ``mtime_ns``.

    Stats only, no file contents, so it stays cheap on large weights. Hidden entries (editor
    swap files, ``.ipynb_checkpoints``, our own atomic-write temporaries) and ``__pycache__``
    are skipped. Folders count by name only, so adding an empty version folder is a change but
    a folder's own timestamp is not.
    """
    digest = hashlib.blake2b(digest_size=16)
    for line in _entries(model_dir, ""):
        digest.update(line.encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
    return digest.hexdigest()


def _entries(directory: Path, prefix: str) -> Iterator[str]:
    """One line per entry below ``directory``, in a stable (sorted) order."""
    try:
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda entry: entry.name)
    except (FileNotFoundError, NotADirectoryError):
        return  # removed while we walked: the next poll sees the final state
    for entry in children:
        if entry.name.startswith(".") or entry.name in _SKIPPED_NAMES:
            continue
        relative = f"{prefix}{entry.name}"
        if entry.is_dir(follow_symlinks=False):
            yield f"d {relative}"
            yield from _entries(Path(entry.path), f"{relative}/")
        else:
            yield _file_line(entry, relative)


def _file_line(entry: os.DirEntry[str], relative: str) -> str:
    """A file (or a symlink, described by what it points to) as ``f path size mtime_ns``."""
    try:
        stat = entry.stat(follow_symlinks=True)
    except OSError:
        return f"x {relative}"  # a dangling symlink or a file removed mid-walk
    return f"f {relative} {stat.st_size} {stat.st_mtime_ns}"
