"""The pytorch backend on TorchScript modules scripted in the test."""

from __future__ import annotations

import io
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import requests

from tests.backends.model_folders import context_for, request, write_model
from workbench.backends import get_backend
from workbench.backends.pytorch import input_positions, output_positions
from workbench.errors import InvalidArgumentError, UnavailableError
from workbench.server.hosting import Server

torch = pytest.importorskip("torch")

from workbench.backends.pytorch import PyTorchBackend  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"


def _scripted(module: torch.nn.Module) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript is what Triton serves
        torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


class SubMul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a - b, a * b


def test_naming_rules() -> None:
    assert input_positions(["b", "a"], ["a", "b"]) == {"b": 1, "a": 0}
    assert input_positions(["X__1", "Y__0"], ["a", "b"]) == {"X__1": 1, "Y__0": 0}
    assert input_positions(["X", "Y__0"], ["a", "b"]) == {"X": 0, "Y__0": 1}
    assert output_positions(["OUT__1", "OUT__0"]) == {"OUT__1": 1, "OUT__0": 0}
    assert output_positions(["diff", "prod"]) == {"diff": 0, "prod": 1}


def test_registry() -> None:
    assert get_backend("pytorch").default_model_filename == "model.pt"


def test_example_linear_torchscript(tmp_path: Path) -> None:
    folder = shutil.copytree(EXAMPLES / "linear_torchscript", tmp_path / "linear_torchscript")
    instance = PyTorchBackend().create_instance(context_for(folder))
    torch.manual_seed(0)
    reference = torch.nn.Linear(4, 3)
    xs = [np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32) for n in (2, 1)]
    results = instance.execute([request({"INPUT__0": x}) for x in xs])
    for x, result in zip(xs, results, strict=True):
        [out] = result.outputs
        assert (out.name, out.datatype, out.shape) == ("OUTPUT__0", "FP32", (len(x), 3))
        expected = reference(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(out.array, expected, rtol=1e-5, atol=1e-6)
    instance.close()


INDEX_PBTXT = """
backend: "pytorch"
max_batch_size: 4
input { name: "B__1" data_type: TYPE_INT64 dims: [2] }
input { name: "A__0" data_type: TYPE_INT64 dims: [2] }
output { name: "PROD__1" data_type: TYPE_INT64 dims: [2] }
output { name: "DIFF__0" data_type: TYPE_INT64 dims: [2] }
"""


def test_index_naming_picks_arguments_and_outputs(repo: Path) -> None:
    folder = write_model(repo, "submul", INDEX_PBTXT, {"1/model.pt": _scripted(SubMul())})
    instance = PyTorchBackend().create_instance(context_for(folder))
    a, b = np.array([[5, 6]], np.int64), np.array([[1, 2]], np.int64)
    [result] = instance.execute([request({"B__1": b, "A__0": a}, ["DIFF__0", "PROD__1"])])
    outputs = {t.name: t.array.tolist() for t in result.outputs}
    assert outputs == {"DIFF__0": [[4, 4]], "PROD__1": [[5, 12]]}


def test_forward_argument_naming(repo: Path) -> None:
    pbtxt = """
    backend: "pytorch"
    input { name: "b" data_type: TYPE_FP32 dims: [2] }
    input { name: "a" data_type: TYPE_FP32 dims: [2] }
    output { name: "diff" data_type: TYPE_FP32 dims: [2] }
    output { name: "prod" data_type: TYPE_FP32 dims: [2] }
    """
    folder = write_model(repo, "named", pbtxt, {"1/model.pt": _scripted(SubMul())})
    instance = PyTorchBackend().create_instance(context_for(folder))
    a, b = np.array([3, 4], np.float32), np.array([1, 1], np.float32)
    [result] = instance.execute([request({"a": a, "b": b})])
    assert {t.name: t.array.tolist() for t in result.outputs} == {
        "diff": [2, 3],
        "prod": [3, 4],
    }


class Twice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_bf16_tensors(repo: Path) -> None:
    pbtxt = """
    backend: "pytorch"
    input { name: "INPUT__0" data_type: TYPE_BF16 dims: [3] }
    output { name: "OUTPUT__0" data_type: TYPE_BF16 dims: [3] }
    """
    folder = write_model(repo, "bf16", pbtxt, {"1/model.pt": _scripted(Twice())})
    instance = PyTorchBackend().create_instance(context_for(folder))
    values = torch.tensor([1.5, -2.0, 0.25], dtype=torch.bfloat16)
    from workbench._types import Tensor

    bits = Tensor("INPUT__0", "BF16", values.view(torch.int16).numpy().view(np.uint16))
    [result] = instance.execute([request({"INPUT__0": bits})])
    [out] = result.outputs
    assert out.datatype == "BF16"
    back = torch.from_numpy(out.array.view(np.int16)).view(torch.bfloat16)
    assert back.float().tolist() == [3.0, -4.0, 0.5]


def test_gpu_instance_without_cuda(repo: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    folder = write_model(repo, "gpu", INDEX_PBTXT, {"1/model.pt": _scripted(SubMul())})
    with pytest.raises(UnavailableError, match="KIND_GPU"):
        PyTorchBackend().create_instance(context_for(folder, kind="KIND_GPU"))


def test_runtime_error_fails_the_batch(repo: Path) -> None:
    folder = write_model(repo, "submul", INDEX_PBTXT, {"1/model.pt": _scripted(SubMul())})
    instance = PyTorchBackend().create_instance(context_for(folder))
    a, b = np.ones((1, 2), np.int64), np.ones((1, 3), np.int64)
    [result] = instance.execute([request({"A__0": a, "B__1": b})])
    assert result.error is not None and "submul" in str(result.error)


class Accumulate(torch.nn.Module):
    """``OUTPUT__0 = INPUT__0 + STATE_IN__1``; the new state is the output (a running sum)."""

    def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        total = x + state
        return total, total


STATE_PBTXT = """
name: "{name}"
backend: "pytorch"
max_batch_size: 1
input [{{ name: "{input}" data_type: TYPE_FP32 dims: [ 1 ] }}]
output [{{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] }}]
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  direct {{ }}
  state [{{
    input_name: "STATE_IN__1" output_name: "{state_out}" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state {{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "zero" }}
  }}]
}}
"""


def _state_model(repo: Path, name: str, input_name: str, state_out: str) -> Path:
    pbtxt = STATE_PBTXT.format(name=name, input=input_name, state_out=state_out)
    return write_model(repo, name, pbtxt, {"1/model.pt": _scripted(Accumulate())})


def test_implicit_state_binds_by_index_like_an_input_and_an_output(repo: Path) -> None:
    folder = _state_model(repo, "acc", "INPUT__0", "STATE_OUT__1")
    instance = PyTorchBackend().create_instance(context_for(folder))
    x, state = np.array([[5.0]], np.float32), np.array([[2.0]], np.float32)
    [result] = instance.execute([request({"INPUT__0": x, "STATE_IN__1": state})])
    assert {t.name: t.array.tolist() for t in result.outputs} == {
        "OUTPUT__0": [[7.0]],
        "STATE_OUT__1": [[7.0]],
    }


@pytest.mark.parametrize(
    ("input_name", "state_out", "message"),
    [
        ("INPUT", "STATE_OUT__1", "not all inputs and outputs follow the <name>__<index>"),
        ("x", "STATE_OUT__1", "not all inputs and outputs follow the <name>__<index>"),
        ("INPUT__0", "STATE_OUT", "but state 'STATE_OUT' does not follow the <name>__<index>"),
    ],
)
def test_a_model_with_state_must_name_everything_by_index(
    repo: Path, input_name: str, state_out: str, message: str
) -> None:
    folder = _state_model(repo, "acc", input_name, state_out)
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        PyTorchBackend().create_instance(context_for(folder))


def test_a_sequence_carries_its_state_through_a_torchscript_model(tmp_path: Path) -> None:
    _state_model(tmp_path, "acc", "INPUT__0", "STATE_OUT__1")
    with Server(tmp_path, http_port=0, grpc_port=0, metrics_port=0) as server:
        sums = []
        for index, value in enumerate([5.0, 6.0, 7.0]):
            flags = {"sequence_start": index == 0, "sequence_end": index == 2}
            body = {
                "inputs": [
                    {"name": "INPUT__0", "shape": [1, 1], "datatype": "FP32", "data": [value]}
                ],
                "parameters": {"sequence_id": 41, **flags},
            }
            reply = requests.post(f"{server.url}/v2/models/acc/infer", json=body, timeout=30)
            assert reply.status_code == 200, reply.text
            outputs = reply.json()["outputs"]
            assert [o["name"] for o in outputs] == ["OUTPUT__0"]  # the state stays inside
            sums.append(outputs[0]["data"][0])
    assert sums == [5.0, 11.0, 18.0]
