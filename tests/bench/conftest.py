"""A Workbench over a small repository for sweeps: the example linear ONNX model, a
two-input python model with a dynamic dim, and the example text ensemble."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.notebook.conftest import EXAMPLES, copy_linear
from workbench.notebook import Workbench

PAIR_CONFIG = """
name: "pair"
backend: "python"
max_batch_size: 4
input [
  { name: "A" data_type: TYPE_INT32 dims: [ 2 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ -1 ] }
]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

PAIR_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            total = a.sum(axis=1, keepdims=True) + b.sum(axis=1, keepdims=True)
            out = pb_utils.Tensor("SUM", total.astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""


def write_pair_model(root: Path) -> Path:
    model = root / "pair"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(PAIR_CONFIG)
    (model / "1" / "model.py").write_text(textwrap.dedent(PAIR_MODEL))
    return model


@pytest.fixture(scope="module")
def sweep_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench") / "repo"
    root.mkdir()
    copy_linear(root, "linear")
    write_pair_model(root)
    for name in ("preprocess", "postprocess", "linear_onnx", "text_classifier"):
        shutil.copytree(EXAMPLES / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def sweep_bench(sweep_repository: Path) -> Iterator[Workbench]:
    bench = Workbench(sweep_repository)
    try:
        yield bench
    finally:
        bench.stop()
