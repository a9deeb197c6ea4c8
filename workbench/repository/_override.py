"""Model file override: the ``file:<path>`` parameters of Triton's load API.

Triton writes such a model into a temporary folder (its ``LocalizeRepoAgent``), never into the
user's repository, and deletes that folder when the model is unloaded. This module does the
same, with Triton's checks and error messages.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from google.protobuf import json_format, text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.errors import InvalidArgumentError

FILE_PREFIX = "file:"
_TEMP_PREFIX = "workbench-override-"
#: Dropped next to the model folder so that removal never deletes anything we didn't create.
_MARKER = ".workbench-override"


def write_override_dir(
    name: str, config: str | bytes | ModelConfig | None, files: Mapping[str, bytes]
) -> Path:
    """Create ``<temp>/<name>/`` holding ``files`` and ``config.pbtxt``; returns that folder."""
    if not files:
        raise InvalidArgumentError(
            "model file override needs at least one 'file:' parameter; a config-only override "
            "applies to the model folder in the repository"
        )
    if config is None:
        raise InvalidArgumentError(
            "Load parameter 'config' must be specified for model file override"
        )
    parsed = config_from_override(config)
    model_dir = Path(tempfile.mkdtemp(prefix=_TEMP_PREFIX)) / name
    try:
        (model_dir.parent / _MARKER).touch()
        model_dir.mkdir()
        for key, content in files.items():
            _write_file(model_dir, key, content)
        # Written last, so the 'config' parameter wins over a 'file:config.pbtxt'.
        (model_dir / "config.pbtxt").write_text(text_format.MessageToString(parsed), "utf-8")
    except BaseException:
        shutil.rmtree(model_dir.parent, ignore_errors=True)
        raise
    return model_dir


def remove_override_dir(model_dir: Path) -> None:
    """Delete a folder made by ``write_override_dir`` (when its model unloads); else no-op."""
    parent = Path(model_dir).parent
    if parent.name.startswith(_TEMP_PREFIX) and (parent / _MARKER).is_file():
        shutil.rmtree(parent, ignore_errors=True)


def config_from_override(config: str | bytes | ModelConfig) -> ModelConfig:
    """The ``config`` load parameter (Triton's JSON form of ModelConfig) as a message."""
    if isinstance(config, ModelConfig):
        return config
    text = config.decode("utf-8") if isinstance(config, bytes) else config
    try:
        return json_format.Parse(text, ModelConfig())
    except json_format.ParseError as exc:
        raise InvalidArgumentError(f"Invalid config override: {exc}") from exc


def _write_file(model_dir: Path, key: str, content: bytes) -> None:
    parameter = key if key.startswith(FILE_PREFIX) else FILE_PREFIX + key
    target = _resolve_inside(model_dir, parameter)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise InvalidArgumentError(
            f"Invalid file parameter '{parameter}', directory has been created as a file"
        ) from exc
    if target.is_dir():
        raise InvalidArgumentError(
            f"Invalid file parameter '{parameter}', a directory exists at that path"
        )
    target.write_bytes(bytes(content))


def _resolve_inside(model_dir: Path, parameter: str) -> Path:
    """The normalized target of ``file:<relative path>``; it must stay within ``model_dir``."""
    relative = parameter[len(FILE_PREFIX) :]
    normalized = os.path.normpath(model_dir / relative)
    pure = PurePosixPath(relative.replace("\\", "/"))
    inside = os.path.commonpath([normalized, model_dir]) == str(model_dir)
    if not relative or pure.is_absolute() or not inside or normalized == str(model_dir):
        raise InvalidArgumentError(
            f"Invalid file parameter '{parameter}' with normalized path '{normalized}' must "
            "stay within model directory."
        )
    return Path(normalized)
