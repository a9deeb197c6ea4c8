"""The example repository: every config parses and each step of the ensemble runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.backends.model_folders import context_for, load_config, request
from workbench._types import Tensor
from workbench.backends import backend_for, get_backend

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"
NAMES = ["text_python", "linear_onnx", "linear_torchscript", "preprocess", "postprocess"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLES, tmp_path / "model_repository"))


def _instance(repo: Path, name: str) -> object:
    config = load_config(repo / name)
    return get_backend(backend_for(config)).create_instance(context_for(repo / name))


def _text(*items: str) -> Tensor:
    array = np.array([[s.encode()] for s in items], dtype=np.object_)
    return Tensor("TEXT", "BYTES", array)


def test_configs_parse(repo: Path) -> None:
    ensemble = load_config(repo / "text_classifier")
    steps = ensemble.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["preprocess", "linear_onnx", "postprocess"]
    assert dict(steps[2].output_map) == {"LABEL": "LABEL", "SCORE": "SCORE"}
    assert [backend_for(load_config(repo / n)) for n in NAMES] == [
        "python", "onnxruntime", "pytorch", "python", "python",
    ]  # fmt: skip


def test_text_python(repo: Path) -> None:
    instance = _instance(repo, "text_python")
    [result] = instance.execute([request({"TEXT": _text("hello", "Größe")})])  # type: ignore[attr-defined]
    outputs = {t.name: t.array.tolist() for t in result.outputs}
    assert outputs == {"UPPER": [[b"HELLO"], ["GRÖSSE".encode()]], "LENGTH": [[5], [5]]}


def test_ensemble_steps_chain(repo: Path) -> None:
    pytest.importorskip("onnxruntime")
    pre, linear, post = (_instance(repo, n) for n in ("preprocess", "linear_onnx", "postprocess"))
    [features] = pre.execute([request({"TEXT": _text("Hello World 42", "aeiou")})])  # type: ignore[attr-defined]
    feats = features.outputs[0]
    assert feats.shape == (2, 4) and feats.datatype == "FP32"
    [logits] = linear.execute([request({"INPUT": feats.array})])  # type: ignore[attr-defined]
    [labels] = post.execute([request({"LOGITS": logits.outputs[0].array})])  # type: ignore[attr-defined]
    outputs = {t.name: t for t in labels.outputs}
    assert outputs["LABEL"].shape == (2, 1) and outputs["LABEL"].datatype == "BYTES"
    assert set(outputs["LABEL"].array.ravel()) <= {b"negative", b"neutral", b"positive"}
    assert np.all((outputs["SCORE"].array > 1 / 3) & (outputs["SCORE"].array <= 1))
