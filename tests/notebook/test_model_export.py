"""from_torch (via ONNX and TorchScript) and from_onnx write valid folders that serve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.notebook.conftest import EXAMPLES, linear_reference
from workbench.config import read_config, validate
from workbench.errors import AlreadyExistsError, InvalidArgumentError
from workbench.notebook import Workbench
from workbench.notebook.model_export import export_onnx, export_torch

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


def _module() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _valid(folder: Path) -> Any:
    config = read_config(folder / "config.pbtxt")
    assert validate(config, model_name=folder.name, model_path=folder) == []
    return config


@pytest.mark.integration
def test_from_torch_both_ways_serves_the_modules_outputs(tmp_path: Path) -> None:
    module = _module()
    x = torch.randn(3, 4)
    expected = module(x).detach().numpy()
    bench = Workbench.from_torch(module, x, tmp_path / "repo", "mlp", via="onnx")
    try:
        onnx_config = _valid(tmp_path / "repo" / "mlp")
        assert onnx_config.backend == "onnxruntime" and onnx_config.max_batch_size == 8
        assert [(t.name, list(t.dims)) for t in onnx_config.input] == [("INPUT0", [4])]
        out = bench.infer("mlp", {"INPUT0": x.numpy()})
        np.testing.assert_allclose(out["OUTPUT0"], expected, rtol=1e-5, atol=1e-6)

        bench.add_torch(module, x, "mlp_ts", via="torchscript")
        ts_config = _valid(tmp_path / "repo" / "mlp_ts")
        assert ts_config.platform == "pytorch_libtorch"
        assert [(t.name, list(t.dims)) for t in ts_config.output] == [("OUTPUT__0", [3])]
        out = bench.infer("mlp_ts", {"INPUT__0": x.numpy()})
        np.testing.assert_allclose(out["OUTPUT__0"], expected, rtol=1e-5, atol=1e-6)
        states = {r["name"]: r["state"] for r in bench.models().to_dict("records")}
        assert states == {"mlp": "READY", "mlp_ts": "READY"}
    finally:
        bench.stop()


@pytest.mark.integration
def test_from_onnx_reads_the_graph(tmp_path: Path) -> None:
    source = EXAMPLES / "linear_onnx" / "1" / "model.onnx"
    bench = Workbench.from_onnx(source, tmp_path / "repo", "linear")
    try:
        config = _valid(tmp_path / "repo" / "linear")
        # Triton's auto-complete: a variable first dimension everywhere -> batching, size 4
        assert config.max_batch_size == 4 and config.HasField("dynamic_batching")
        assert config.instance_group[0].count == 1
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        out = bench.infer("linear", {"INPUT": x})
        np.testing.assert_allclose(out["OUTPUT"], linear_reference(x), rtol=1e-5)
    finally:
        bench.stop()


def test_multiple_inputs_outputs_and_no_batching(tmp_path: Path) -> None:
    class TwoWay(torch.nn.Module):
        def forward(self, a: Any, b: Any) -> Any:
            return a + b, (a * b).sum(dim=-1)

    a, b = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float32)
    folder = export_torch(TwoWay(), (a, b), tmp_path, "two", via="torchscript", max_batch_size=0)
    config = _valid(folder)
    assert [list(t.dims) for t in config.input] == [[2, 3], [2, 3]]
    assert [(t.name, list(t.dims)) for t in config.output] == [
        ("OUTPUT__0", [2, 3]),
        ("OUTPUT__1", [2]),
    ]
    assert (folder / "1" / "model.pt").is_file()


def test_existing_folder_needs_overwrite(tmp_path: Path) -> None:
    source = EXAMPLES / "linear_onnx" / "1" / "model.onnx"
    export_onnx(source, tmp_path, "linear", max_batch_size=2)
    with pytest.raises(AlreadyExistsError, match="overwrite=True"):
        export_onnx(source, tmp_path, "linear")
    export_onnx(source, tmp_path, "linear", overwrite=True, max_batch_size=8)
    assert read_config(tmp_path / "linear" / "config.pbtxt").max_batch_size == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linear"]  # no staging left behind


def test_bad_arguments_are_clear(tmp_path: Path) -> None:
    module = _module()
    with pytest.raises(InvalidArgumentError, match="via must be"):
        export_torch(module, torch.ones(1, 4), tmp_path, "m", via="tflite")
    with pytest.raises(InvalidArgumentError, match="leading batch dimension"):
        export_torch(module, torch.tensor(1.0), tmp_path, "m")
    with pytest.raises(InvalidArgumentError, match="tensor or a tuple"):
        export_torch(module, [1, 2, 3, 4], tmp_path, "m")
    assert not (tmp_path / "m").exists()
