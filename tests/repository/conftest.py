"""Builders for model repositories on disk."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.repository.s3_server import aws_environment, bucket, s3  # noqa: F401 (fixtures)

MakeModel = Callable[..., Path]

ADD_ONE = """
name: "add_one"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""


def _make_model(
    root: Path, name: str, *, config: str | None = ADD_ONE, versions: tuple[str, ...] = ("1",)
) -> Path:
    """A model folder with an optional config.pbtxt and a model.py in each version folder."""
    model_dir = root / name
    model_dir.mkdir(parents=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    for version in versions:
        (model_dir / version).mkdir()
        (model_dir / version / "model.py").write_text("class TritonPythonModel: ...\n")
    return model_dir


@pytest.fixture
def repo_root(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    return root


@pytest.fixture
def make_model() -> MakeModel:
    """``make_model(root, name, *, config=ADD_ONE, versions=("1",))`` builds a model folder."""
    return _make_model
