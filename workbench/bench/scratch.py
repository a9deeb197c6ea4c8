"""The scratch copy of a model that a sweep reconfigures, so the user's files stay untouched.

The copy sits next to the model in the served repository (the server only loads from there)
under ``<name>__sweep``. Model files are hard-linked where the filesystem allows (no copy of
large weights); ``config.pbtxt`` is always written fresh, as a new file, so writing it never
reaches the user's file through a link.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from workbench.config import ModelConfig, write_config

SCRATCH_SUFFIX = "__sweep"
_SKIPPED = shutil.ignore_patterns("__pycache__", "config.pbtxt", "*.bak")


def scratch_name(model: str) -> str:
    return f"{model}{SCRATCH_SUFFIX}"


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def make_scratch(model_dir: Path, repository: Path, model: str) -> Path:
    """Copy ``model_dir`` (without its config) to ``repository/<model>__sweep``."""
    target = repository / scratch_name(model)
    remove_scratch(target)
    shutil.copytree(model_dir, target, ignore=_SKIPPED, copy_function=_link_or_copy)
    return target


def write_scratch_config(target: Path, config: ModelConfig) -> None:
    """Write the point's config, renamed to the scratch model."""
    renamed = ModelConfig()
    renamed.CopyFrom(config)
    renamed.name = target.name
    write_config(renamed, target / "config.pbtxt", backup=False)


def remove_scratch(target: Path) -> None:
    if target.name.endswith(SCRATCH_SUFFIX) and target.exists():
        shutil.rmtree(target)


__all__ = ["SCRATCH_SUFFIX", "make_scratch", "remove_scratch", "scratch_name"]
