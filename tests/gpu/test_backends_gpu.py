"""Backends on an NVIDIA GPU (skipped where there is none, or no GPU build of a framework)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.backends.model_folders import context_for, request
from workbench.backends.tensorrt import gpu_present

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_present(), reason="needs an NVIDIA GPU"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"


def test_onnxruntime_cuda_provider(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is not installed")
    from workbench.backends.onnxruntime import OnnxRuntimeBackend

    folder = shutil.copytree(EXAMPLES / "linear_onnx", tmp_path / "linear_onnx")
    instance = OnnxRuntimeBackend().create_instance(context_for(folder, kind="KIND_GPU"))
    assert instance.session.get_providers()[0] == "CUDAExecutionProvider"
    [result] = instance.execute([request({"INPUT": np.ones((2, 4), np.float32)})])
    assert result.outputs[0].shape == (2, 3)


def test_pytorch_on_cuda(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch is a CPU build")
    from workbench.backends.pytorch import PyTorchBackend

    folder = shutil.copytree(EXAMPLES / "linear_torchscript", tmp_path / "linear_torchscript")
    instance = PyTorchBackend().create_instance(context_for(folder, kind="KIND_GPU"))
    [result] = instance.execute([request({"INPUT__0": np.ones((2, 4), np.float32)})])
    assert result.outputs[0].shape == (2, 3)


def test_tensorrt_engine_from_onnx(tmp_path: Path) -> None:
    trt = pytest.importorskip("tensorrt")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("the tensorrt backend needs a CUDA build of torch")
    from workbench.backends.tensorrt import TensorRTBackend

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse((EXAMPLES / "linear_onnx" / "1" / "model.onnx").read_bytes())
    profile = builder.create_optimization_profile()
    profile.set_shape("INPUT", (1, 4), (4, 4), (8, 4))
    build_config = builder.create_builder_config()
    build_config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, build_config)
    folder = tmp_path / "linear_trt"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.plan").write_bytes(bytes(engine))
    (folder / "config.pbtxt").write_text(
        (EXAMPLES / "linear_onnx" / "config.pbtxt")
        .read_text()
        .replace('"linear_onnx"', '"linear_trt"')
        .replace("onnxruntime_onnx", "tensorrt_plan")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        instance = TensorRTBackend().create_instance(context_for(folder, kind="KIND_GPU"))
    [result] = instance.execute([request({"INPUT": np.ones((2, 4), np.float32)})])
    assert result.error is None and result.outputs[0].shape == (2, 3)
