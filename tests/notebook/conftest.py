"""Fixtures: a Workbench on loopback over a small repository (ONNX linear + python add)."""

from __future__ import annotations

import importlib.util
import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.core.conftest import write_add_model
from workbench.notebook import Workbench

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"
_names = itertools.count()


def copy_linear(repository: Path, name: str) -> Path:
    """The example ``linear_onnx`` model (``x @ W + b``, FP32[4] -> FP32[3]) as ``name``."""
    target = repository / name
    shutil.copytree(EXAMPLES / "linear_onnx", target)
    config = target / "config.pbtxt"
    config.write_text(config.read_text().replace('"linear_onnx"', f'"{name}"'))
    return target


def linear_reference(x: np.ndarray) -> np.ndarray:
    """What ``linear_onnx`` computes, from the generator's seeded weights."""
    spec = importlib.util.spec_from_file_location(
        "generate_models", EXAMPLES / "generate_models.py"
    )
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    weight, bias = generator.linear_weights()
    return np.asarray(x, dtype=np.float32) @ weight + bias


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("notebook") / "repo"
    root.mkdir()
    copy_linear(root, "linear")
    write_add_model(root, "add")
    return root


@pytest.fixture(scope="module")
def bench(repository: Path) -> Iterator[Workbench]:
    workbench = Workbench(repository)
    try:
        yield workbench
    finally:
        workbench.stop()


@pytest.fixture
def new_model(bench: Workbench) -> Callable[[], str]:
    """Adds a fresh copy of ``linear`` to the running bench's repository and loads it."""

    def make() -> str:
        name = f"tunable_{next(_names)}"
        copy_linear(bench.repository, name)
        bench.load(name)
        return name

    return make
