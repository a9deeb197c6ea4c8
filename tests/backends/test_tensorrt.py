"""The tensorrt backend explains itself on machines without a GPU or TensorRT."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.backends.model_folders import context_for, write_model
from workbench.backends import get_backend
from workbench.backends.tensorrt import TensorRTBackend, gpu_present
from workbench.errors import UnavailableError

PBTXT = """
platform: "tensorrt_plan"
max_batch_size: 8
input { name: "INPUT" data_type: TYPE_FP32 dims: [4] }
output { name: "OUTPUT" data_type: TYPE_FP32 dims: [3] }
"""


def test_registry() -> None:
    backend = get_backend("tensorrt")
    assert (backend.name, backend.default_model_filename) == ("tensorrt", "model.plan")


def test_unavailable_without_gpu_or_tensorrt(repo: Path) -> None:
    folder = write_model(repo, "engine", PBTXT, {"1/model.plan": b"not an engine"})
    if gpu_present():
        try:
            import tensorrt  # noqa: F401
        except ImportError:
            with pytest.raises(UnavailableError, match="tensorrt is not installed"):
                TensorRTBackend().create_instance(context_for(folder))
            return
        pytest.skip("TensorRT is installed here; covered by tests/gpu")
    with pytest.raises(UnavailableError, match="TensorRT needs an NVIDIA GPU; none was found"):
        TensorRTBackend().create_instance(context_for(folder, kind="KIND_GPU"))


def test_auto_complete_leaves_config_alone(repo: Path) -> None:
    folder = write_model(repo, "engine", PBTXT, {"1/model.plan": b""})
    from tests.backends.model_folders import load_config

    config = load_config(folder)
    before = config.SerializeToString()
    TensorRTBackend().auto_complete(config, folder, folder / "1")
    assert config.SerializeToString() == before
