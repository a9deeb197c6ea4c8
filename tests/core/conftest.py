from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ADD_ONE_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
instance_group [{{ count: {count} kind: KIND_CPU }}]
"""

ADD_MODEL = """
import time
import numpy as np
import triton_python_backend_utils as pb_utils

DELTA = {delta}
SLEEP = {sleep}

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if SLEEP:
                time.sleep(SLEEP)
            out = pb_utils.Tensor("OUTPUT0", (x + DELTA).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def write_add_model(
    root: Path,
    name: str,
    *,
    delta: float = 1.0,
    sleep: float = 0.0,
    count: int = 1,
    version: int = 1,
) -> Path:
    """A python-backend model adding ``delta`` to an FP32[4] input."""
    model = root / name
    (model / str(version)).mkdir(parents=True, exist_ok=True)
    (model / "config.pbtxt").write_text(ADD_ONE_CONFIG.format(name=name, count=count))
    (model / str(version) / "model.py").write_text(
        textwrap.dedent(ADD_MODEL.format(delta=delta, sleep=sleep))
    )
    return model


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root
