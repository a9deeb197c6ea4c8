"""``EXECUTION_ENV_PATH`` that cannot be used, side by side with tritonserver 2.51: a path that
does not exist and an environment without ``bin/activate`` fail the load with the same status
and message (``$$TRITON_MODEL_DIRECTORY`` replaced by the model's folder on both). Environments
that work are tested in ``tests/backends/python/test_execution_env.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.peers import Peers, TritonServerProcess
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return []
"""

CONFIG = """name: "{name}"
backend: "python"
input [{{ name: "IN" data_type: TYPE_FP32 dims: [1] }}]
output [{{ name: "OUT" data_type: TYPE_FP32 dims: [1] }}]
parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{env}" }} }}
"""

#: model -> its EXECUTION_ENV_PATH
MODELS = {
    "env_missing": "$$TRITON_MODEL_DIRECTORY/absent",
    "env_without_activate": "$$TRITON_MODEL_DIRECTORY/bare",
}


def _repository(root: Path) -> Path:
    for name, env in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(MODEL)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, env=env))
    (root / "env_without_activate" / "bare" / "bin").mkdir(parents=True)
    return root


def _loads(url: str, root: Path) -> list[Any]:
    seen = []
    for name in MODELS:
        answer = requests.post(f"{url}/v2/repository/models/{name}/load")
        seen.append([name, answer.status_code, answer.text.replace(str(root), "<repo>")])
    return seen


def test_unusable_execution_environments_fail_the_load_as_in_triton(
    peers: Peers, tmp_path: Path
) -> None:
    triton_root = _repository(tmp_path / "triton")
    with TritonServerProcess(
        peers, triton_root, log_path=tmp_path / "triton.log", load_models=()
    ) as triton:
        theirs = _loads(f"http://{triton.http_url}", triton_root)
    ours_root = _repository(tmp_path / "ours")
    with Server(
        ours_root, http_port=0, grpc_port=0, metrics_port=0, model_control_mode="explicit"
    ) as ours:
        mine = _loads(ours.url, ours_root)
    assert mine == theirs
    assert "Failed to get the canonical path for <repo>/env_missing/absent." in mine[0][2]
    assert "The Python environment should contain an 'activate' script." in mine[1][2]
