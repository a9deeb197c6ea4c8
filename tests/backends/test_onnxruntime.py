"""The onnxruntime backend on small graphs built with ``onnx.helper``."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

from tests.backends.model_folders import context_for, load_config, request, write_model
from workbench._types import Tensor
from workbench.backends import backend_for, get_backend
from workbench.errors import ConfigError, InvalidArgumentError, UnavailableError, UnsupportedError

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from workbench.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"


def _save(graph: object, path: Path) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()  # type: ignore[no-any-return]


def _graph(nodes: list, inputs: list, outputs: list) -> object:
    return helper.make_graph(nodes, "g", inputs, outputs)


def _value(name: str, elem: int, shape: list) -> object:
    return helper.make_tensor_value_info(name, elem, shape)


def _generator() -> object:
    spec = importlib.util.spec_from_file_location(
        "generate_models", EXAMPLES / "generate_models.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_registry_and_platform() -> None:
    assert get_backend("onnxruntime").default_model_filename == "model.onnx"
    assert backend_for(model_config_pb2.ModelConfig(platform="onnxruntime_onnx")) == "onnxruntime"
    assert backend_for(model_config_pb2.ModelConfig(platform="pytorch_libtorch")) == "pytorch"
    assert backend_for(model_config_pb2.ModelConfig(platform="tensorrt_plan")) == "tensorrt"
    assert backend_for(model_config_pb2.ModelConfig(backend="python")) == "python"
    with pytest.raises(UnsupportedError, match="known backends: onnxruntime, python"):
        get_backend("tensorflow")


def test_example_linear_model_batches_requests(tmp_path: Path) -> None:
    folder = shutil.copytree(EXAMPLES / "linear_onnx", tmp_path / "linear_onnx")
    instance = OnnxRuntimeBackend().create_instance(context_for(folder))
    weight, bias = _generator().linear_weights()  # type: ignore[attr-defined]
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((n, 4)).astype(np.float32) for n in (1, 3, 2)]
    results = instance.execute([request({"INPUT": x}) for x in xs])
    for x, result in zip(xs, results, strict=True):
        [out] = result.outputs
        assert (out.name, out.datatype, out.shape) == ("OUTPUT", "FP32", (len(x), 3))
        np.testing.assert_allclose(out.array, x @ weight + bias, rtol=1e-5, atol=1e-6)
    instance.close()


def _batchable(repo: Path, pbtxt: str = 'backend: "onnxruntime"') -> Path:
    graph = _graph(
        [helper.make_node("Relu", ["X"], ["Y"])],
        [_value("X", TensorProto.FLOAT, ["n", 5])],
        [_value("Y", TensorProto.FLOAT, ["n", 5])],
    )
    return write_model(repo, "relu", pbtxt, {"1/model.onnx": _save(graph, repo)})


def test_auto_complete_batchable_graph(repo: Path) -> None:
    folder = _batchable(repo)
    config = load_config(folder)
    OnnxRuntimeBackend().auto_complete(config, folder, folder / "1")
    assert config.max_batch_size == 4
    assert config.HasField("dynamic_batching")
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("X", model_config_pb2.TYPE_FP32, [5])
    ]
    assert [(t.name, list(t.dims)) for t in config.output] == [("Y", [5])]


def test_auto_complete_keeps_configured_io_and_max_batch_size(repo: Path) -> None:
    folder = _batchable(repo, 'backend: "onnxruntime"\nmax_batch_size: 2')
    config = load_config(folder)
    OnnxRuntimeBackend().auto_complete(config, folder, folder / "1")
    assert config.max_batch_size == 2 and config.HasField("dynamic_batching")


def test_auto_complete_fixed_shapes(repo: Path) -> None:
    graph = _graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        [_value("X", TensorProto.INT64, [2, 3])],
        [_value("Y", TensorProto.INT64, [2, 3])],
    )
    folder = write_model(
        repo, "fixed", 'backend: "onnxruntime"', {"1/model.onnx": _save(graph, repo)}
    )
    config = load_config(folder)
    OnnxRuntimeBackend().auto_complete(config, folder, folder / "1")
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [2, 3]
    config = load_config(folder)
    config.max_batch_size = 8
    with pytest.raises(ConfigError, match="does not support batching"):
        OnnxRuntimeBackend().auto_complete(config, folder, folder / "1")


def test_string_model(repo: Path) -> None:
    graph = _graph(
        [
            helper.make_node(
                "StringNormalizer",
                ["TEXT"],
                ["UPPER"],
                case_change_action="UPPER",
                locale="C.UTF-8",
            )
        ],
        [_value("TEXT", TensorProto.STRING, [3])],
        [_value("UPPER", TensorProto.STRING, [3])],
    )
    pbtxt = """
    backend: "onnxruntime"
    input { name: "TEXT" data_type: TYPE_STRING dims: [3] }
    output { name: "UPPER" data_type: TYPE_STRING dims: [3] }
    """
    folder = write_model(repo, "strings", pbtxt, {"1/model.onnx": _save(graph, repo)})
    instance = OnnxRuntimeBackend().create_instance(context_for(folder))
    text = Tensor("TEXT", "BYTES", np.array([b"abc", "é".encode(), b"x y"], dtype=object))
    [result] = instance.execute([request({"TEXT": text})])
    [out] = result.outputs
    assert out.datatype == "BYTES"
    assert out.array.tolist() == [b"ABC", "É".encode(), b"X Y"]


def test_fp16_bool_and_int_model(repo: Path) -> None:
    graph = _graph(
        [
            helper.make_node("Add", ["H", "H"], ["H2"]),
            helper.make_node("Not", ["B"], ["NB"]),
            helper.make_node("Cast", ["I"], ["I8"], to=TensorProto.UINT8),
        ],
        [
            _value("H", TensorProto.FLOAT16, ["n", 2]),
            _value("B", TensorProto.BOOL, ["n", 2]),
            _value("I", TensorProto.INT32, ["n", 2]),
        ],
        [
            _value("H2", TensorProto.FLOAT16, ["n", 2]),
            _value("NB", TensorProto.BOOL, ["n", 2]),
            _value("I8", TensorProto.UINT8, ["n", 2]),
        ],
    )
    folder = write_model(
        repo, "mixed", 'backend: "onnxruntime"', {"1/model.onnx": _save(graph, repo)}
    )
    config = load_config(folder)
    OnnxRuntimeBackend().auto_complete(config, folder, folder / "1")
    instance = OnnxRuntimeBackend().create_instance(context_for(folder, config=config))
    inputs = {
        "H": np.array([[0.5, 1.5]], np.float16),
        "B": np.array([[True, False]]),
        "I": np.array([[7, 300]], np.int32),
    }
    first, second = instance.execute([request(inputs), request(inputs, ["NB"])])
    outputs = {t.name: t for t in first.outputs}
    assert outputs["H2"].datatype == "FP16" and outputs["H2"].array.tolist() == [[1.0, 3.0]]
    assert outputs["NB"].datatype == "BOOL" and outputs["NB"].array.tolist() == [[False, True]]
    assert outputs["I8"].datatype == "UINT8" and outputs["I8"].array.tolist() == [[7, 44]]
    assert [t.name for t in second.outputs] == ["NB"]


def test_requests_with_different_shapes_run_separately(repo: Path) -> None:
    graph = _graph(
        [helper.make_node("Relu", ["X"], ["Y"])],
        [_value("X", TensorProto.FLOAT, ["n", "m"])],
        [_value("Y", TensorProto.FLOAT, ["n", "m"])],
    )
    folder = write_model(
        repo, "ragged", 'backend: "onnxruntime"', {"1/model.onnx": _save(graph, repo)}
    )
    config = load_config(folder)
    OnnxRuntimeBackend().auto_complete(config, folder, folder / "1")
    instance = OnnxRuntimeBackend().create_instance(context_for(folder, config=config))
    a, b = -np.ones((1, 2), np.float32), np.ones((2, 3), np.float32)
    results = instance.execute([request({"X": a}), request({"X": b})])
    assert [r.outputs[0].shape for r in results] == [(1, 2), (2, 3)]


def test_gpu_instance_without_cuda_provider(repo: Path) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this machine has onnxruntime's CUDA provider")
    folder = _batchable(repo)
    with pytest.raises(UnavailableError, match="CUDAExecutionProvider"):
        OnnxRuntimeBackend().create_instance(context_for(folder, kind="KIND_GPU"))


def test_missing_model_file(repo: Path) -> None:
    folder = write_model(repo, "none", 'backend: "onnxruntime"', {"1/readme.txt": ""})
    with pytest.raises(UnavailableError, match="unable to find"):
        OnnxRuntimeBackend().create_instance(context_for(folder))


def test_a_config_that_does_not_fit_the_graph_fails_the_load(tmp_path: Path) -> None:
    """Triton's onnxruntime backend refuses it when it creates the instance (ValidateInputs,
    CompareDimsSupported); before, the model loaded and then failed every request."""
    folder = shutil.copytree(EXAMPLES / "linear_onnx", tmp_path / "linear_onnx")
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ 4 ]", "dims: [ 5 ]", 1))
    with pytest.raises(InvalidArgumentError) as refused:
        OnnxRuntimeBackend().create_instance(context_for(folder))
    assert refused.value.message.startswith(
        "model 'linear_onnx', tensor 'INPUT': the model expects 2 dimensions (shape [-1,4]) "
        "but the model configuration specifies 2 dimensions"
    )
