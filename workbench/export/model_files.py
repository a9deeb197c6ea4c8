"""Copy a model's files into the stage byte for byte, hashing them on the way.

What goes: the version folders being promoted (renumbered), and the model folder's other files
(a python model's helpers, label files). What stays behind: ``config.pbtxt`` (written fresh
from the production config), the config editor's ``*.bak``, hidden files, ``__pycache__`` and
the ``configs/`` folder of ``--model-config-name`` (the config in use is the one exported).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from workbench.repository.versions import parse_version_folder

_CHUNK = 1 << 20
#: written fresh (config.pbtxt) or not carried (configs/ of --model-config-name): top level only
_TOP_LEVEL_SKIPPED = {"config.pbtxt", "configs"}


def skipped(path: Path) -> bool:
    """Whether a file or folder in a model folder stays out of the export."""
    name = path.name
    return (
        name == "__pycache__"
        or (name.startswith(".") and name != ".gitkeep")
        or name.endswith((".bak", ".pyc"))
    )


def copy_hashed(source: Path, target: Path) -> str:
    """Copy ``source`` to a new file ``target`` (never through an existing link); its SHA-256."""
    if target.exists() or target.is_symlink():
        target.unlink()  # the stage hard-links the current repository: never write through
    digest = hashlib.sha256()
    with open(source, "rb") as reader, open(target, "xb") as writer:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            writer.write(chunk)
    shutil.copymode(source, target)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as reader:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def copy_tree(source: Path, target: Path) -> dict[str, str]:
    """Copy a folder (without skipped entries); ``{relative path: sha256}``."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    hashes: dict[str, str] = {}
    for root, dirs, files in os.walk(source):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not skipped(here / d))
        for name in sorted(files):
            path = here / name
            if skipped(path):
                continue
            relative = path.relative_to(source)
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            hashes[relative.as_posix()] = copy_hashed(path, target / relative)
    return hashes


def copy_model_files(
    source_dir: Path, target_dir: Path, version_map: Mapping[int, int]
) -> tuple[dict[str, str], dict[int, dict[str, str]]]:
    """Copy the model's top-level files and its promoted versions (``source -> dest``
    numbers). Returns the top-level hashes and, per destination version, its hashes."""
    target_dir.mkdir(parents=True, exist_ok=True)
    top: dict[str, str] = {}
    for entry in sorted(source_dir.iterdir()):
        if entry.name in _TOP_LEVEL_SKIPPED or skipped(entry):
            continue
        if parse_version_folder(entry.name) is not None:
            continue
        if entry.is_dir():
            inner = copy_tree(entry, target_dir / entry.name)
            top.update({f"{entry.name}/{path}": sha for path, sha in inner.items()})
        elif entry.is_file():
            top[entry.name] = copy_hashed(entry, target_dir / entry.name)
    versions = {
        dest: copy_tree(source_dir / str(source), target_dir / str(dest))
        for source, dest in sorted(version_map.items())
    }
    return top, versions


__all__ = ["copy_hashed", "copy_model_files", "copy_tree", "file_sha256", "skipped"]
