"""Warmup samples built from ``model_warmup`` and run on every instance (with a fake runner)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.backends.base import ExecResult
from workbench.core.request import InferRequest
from workbench.core.warmup import warm_up, warmup_samples
from workbench.errors import InternalError, InvalidArgumentError, WorkbenchError

BASE = """
name: "m"
backend: "python"
max_batch_size: {mbs}
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] }}
]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }}]
"""


def config(warmup: str, mbs: int = 8) -> ModelConfig:
    return text_format.Parse(BASE.format(mbs=mbs) + warmup, ModelConfig())


class FakeModel:
    """Records every execution; fails the ones whose sample input says so."""

    def __init__(self, fail_on: str = "", raise_error: WorkbenchError | None = None) -> None:
        self.calls: list[tuple[int, list[InferRequest]]] = []
        self.fail_on = fail_on
        self.raise_error = raise_error

    async def run_on_instance(self, index: int, requests: list[InferRequest]) -> list[ExecResult]:
        await asyncio.sleep(0)
        self.calls.append((index, requests))
        if self.raise_error is not None:
            raise self.raise_error
        return [
            ExecResult(error=InternalError(f"boom {i}"))
            if self.fail_on in r.inputs
            else ExecResult()
            for i, r in enumerate(requests)
        ]


def test_batch_size_count_and_zero_data(tmp_path: Path) -> None:
    cfg = config(
        """
        model_warmup [{
          name: "zeros" batch_size: 3 count: 2
          inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
          inputs { key: "TEXT" value: { data_type: TYPE_STRING dims: [ 2 ] zero_data: true } }
        }]
        """
    )
    (sample,) = warmup_samples(cfg, tmp_path)
    assert (sample.name, sample.count, sample.batch_size) == ("zeros", 2, 3)
    requests = sample.requests()
    assert len(requests) == 3 and requests[0] is not requests[1]
    x = requests[0].inputs["INPUT0"]
    # A batching model gets batch_size requests of one row each, not one request of N rows.
    assert x.datatype == "FP32" and x.shape == (1, 4) and not x.array.any()
    text = requests[0].inputs["TEXT"]
    assert text.datatype == "BYTES" and text.array.tolist() == [[b"", b""]]
    assert list(requests[0].inputs) == ["INPUT0", "TEXT"]  # config order


def test_count_zero_runs_once_and_batch_zero_is_skipped(tmp_path: Path) -> None:
    cfg = config(
        """
        model_warmup [
          { name: "skipped" batch_size: 0
            inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
          { name: "once" batch_size: 1
            inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } }
        ]
        """
    )
    assert [(s.name, s.count) for s in warmup_samples(cfg, tmp_path)] == [("once", 1)]


def test_random_data_and_non_batching_shapes(tmp_path: Path) -> None:
    cfg = config(
        """
        model_warmup [{
          name: "random" batch_size: 1
          inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
          inputs { key: "TEXT" value: { data_type: TYPE_STRING dims: [ 2 ] random_data: true } }
          inputs { key: "FLAGS" value: { data_type: TYPE_BOOL dims: [ 3 ] random_data: true } }
        }]
        """,
        mbs=0,
    )
    (request,) = warmup_samples(cfg, tmp_path)[0].requests()
    assert request.inputs["INPUT0"].array.dtype == np.float32
    assert request.inputs["INPUT0"].shape == (4,)  # no batch dimension when max_batch_size is 0
    # Random BYTES are zeros in Triton (4 zero bytes = an empty element).
    assert request.inputs["TEXT"].array.tolist() == [b"", b""]
    flags = request.inputs["FLAGS"].array
    assert flags.dtype == np.bool_ and set(flags.view(np.uint8).tolist()) <= {0, 1}
    assert not request.inputs["INPUT0"].array.flags.writeable


def test_control_inputs_get_no_batch_dimension(tmp_path: Path) -> None:
    cfg = config(
        """
        model_warmup [{
          name: "seq" batch_size: 1
          inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
          inputs { key: "START" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } }
        }]
        """
    )
    (request,) = warmup_samples(cfg, tmp_path)[0].requests()
    assert request.inputs["INPUT0"].shape == (1, 4) and request.inputs["START"].shape == (1,)


def test_input_data_files(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    values = np.arange(4, dtype=np.float32)
    (tmp_path / "warmup" / "x.bin").write_bytes(values.tobytes() + b"extra bytes are ignored")
    texts = [b"hi", b"triton"]
    (tmp_path / "warmup" / "t.bin").write_bytes(
        b"".join(struct.pack("<I", len(t)) + t for t in texts)
    )
    cfg = config(
        """
        model_warmup [{
          name: "files" batch_size: 2
          inputs { key: "INPUT0"
                   value: { data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "x.bin" } }
          inputs { key: "TEXT"
                   value: { data_type: TYPE_STRING dims: [ 2 ] input_data_file: "t.bin" } }
        }]
        """
    )
    first, second = warmup_samples(cfg, tmp_path)[0].requests()
    np.testing.assert_array_equal(first.inputs["INPUT0"].array, values.reshape(1, 4))
    assert second.inputs["TEXT"].array.tolist() == [texts]


@pytest.mark.parametrize(
    ("meta", "error", "message"),
    [
        (
            "data_type: TYPE_FP32 dims: [ -1 ] zero_data: true",
            InvalidArgumentError,
            "warmup setting expects all variable-size dimensions are specified for input 'INPUT0'",
        ),
        (
            'data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "short.bin"',
            InvalidArgumentError,
            "[request id: <id_unknown>] warmup setting expects 16 bytes, but the data provided "
            "from short.binonly has 3 bytes",
        ),
        (
            'data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "missing.bin"',
            InternalError,
            "failed to open text file for read",
        ),
        (
            "data_type: TYPE_FP32 dims: [ 4 ]",
            InvalidArgumentError,
            "[request id: <id_unknown>] warmup setting expects input 'INPUT0' to have "
            "input_data_type set",
        ),
        ("dims: [ 4 ] zero_data: true", InvalidArgumentError, "to have a data_type"),
    ],
)
def test_bad_settings_fail_like_triton(
    tmp_path: Path, meta: str, error: type[Exception], message: str
) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "short.bin").write_bytes(b"abc")
    cfg = config(
        f'model_warmup [{{ name: "bad" batch_size: 1 '
        f'inputs {{ key: "INPUT0" value: {{ {meta} }} }} }}]'
    )
    with pytest.raises(error) as caught:
        warmup_samples(cfg, tmp_path)
    assert message in str(caught.value)


def test_short_bytes_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "t.bin").write_bytes(struct.pack("<I", 2) + b"hi")
    cfg = config(
        'model_warmup [{ name: "s" batch_size: 1 inputs { key: "TEXT" value: '
        '{ data_type: TYPE_STRING dims: [ 2 ] input_data_file: "t.bin" } } }]'
    )
    with pytest.raises(InvalidArgumentError, match="expects 2 BYTES elements"):
        warmup_samples(cfg, tmp_path)


TWO_SAMPLES = """
model_warmup [
  { name: "first" batch_size: 2 count: 3
    inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } } },
  { name: "second" batch_size: 1
    inputs { key: "TEXT" value: { data_type: TYPE_STRING dims: [ 2 ] zero_data: true } } }
]
"""


def test_every_instance_runs_every_sample_count_times(tmp_path: Path) -> None:
    model = FakeModel()
    asyncio.run(warm_up(config(TWO_SAMPLES), tmp_path, 3, model.run_on_instance))
    for index in range(3):
        mine = [len(reqs) for i, reqs in model.calls if i == index]
        assert mine == [2, 2, 2, 1]  # sample order kept; batch_size requests per execution
    requests = [r for _, reqs in model.calls for r in reqs]
    assert len({id(r) for r in requests}) == len(requests)  # fresh requests every execution


def test_a_failing_sample_fails_with_tritons_message(tmp_path: Path) -> None:
    model = FakeModel(fail_on="INPUT0")
    with pytest.raises(InvalidArgumentError) as caught:
        asyncio.run(warm_up(config(TWO_SAMPLES), tmp_path, 2, model.run_on_instance))
    assert str(caught.value) == "failed to run warmup sample 'first': boom 0; boom 1; "
    # Each instance stops at its first failing execution.
    assert sorted(i for i, _ in model.calls) == [0, 1]


def test_an_execution_error_fails_the_sample(tmp_path: Path) -> None:
    model = FakeModel(raise_error=InternalError("instance is gone"))
    with pytest.raises(InvalidArgumentError, match="'first': instance is gone; $"):
        asyncio.run(warm_up(config(TWO_SAMPLES), tmp_path, 1, model.run_on_instance))


def test_no_warmup_runs_nothing(tmp_path: Path) -> None:
    model = FakeModel()
    asyncio.run(warm_up(config(""), tmp_path, 4, model.run_on_instance))
    assert model.calls == []
