"""The python backend runs unchanged Triton ``model.py`` files (no server involved)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2

from tests.backends.model_folders import context_for, load_config, request, write_model
from tests.backends.python.fakes import FakeClient
from workbench._types import Tensor
from workbench.backends import get_backend
from workbench.backends.python import PythonBackend
from workbench.errors import (
    ConfigError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
)

WIRE_TYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES", "BF16",
]  # fmt: skip

ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            outputs = []
            for tensor in request.inputs():
                name = tensor.name().replace("IN_", "OUT_")
                if tensor.triton_dtype() == 14:
                    import torch

                    doubled = torch.utils.dlpack.from_dlpack(tensor.to_dlpack()) * 2
                    outputs.append(pb_utils.Tensor.from_dlpack(name, doubled))
                else:
                    outputs.append(pb_utils.Tensor(name, tensor.as_numpy()))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""


def _config_type(wire: str) -> str:
    return "TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}"


def _echo_pbtxt() -> str:
    ios = []
    for kind, prefix in (("input", "IN_"), ("output", "OUT_")):
        for wire in WIRE_TYPES:
            ios.append(
                f'{kind} {{ name: "{prefix}{wire}" data_type: {_config_type(wire)} dims: [-1] }}'
            )
    return 'backend: "python"\n' + "\n".join(ios)


def _sample(wire: str) -> Tensor:
    if wire == "BYTES":
        return Tensor("IN_BYTES", wire, np.array([b"a", b"\x00bc", "é".encode()], dtype=object))
    if wire == "BF16":
        import torch

        values = torch.tensor([1.5, -2.0, 0.25], dtype=torch.bfloat16)
        return Tensor("IN_BF16", wire, values.view(torch.int16).numpy().view(np.uint16))
    if wire == "BOOL":
        return Tensor("IN_BOOL", wire, np.array([True, False, True]))
    return Tensor(f"IN_{wire}", wire, np.array([1, 2, 3]).astype(_numpy(wire)))


def _numpy(wire: str) -> type:
    from workbench.config.dtypes import numpy_dtype

    return numpy_dtype(wire).type


def _instance(repo: Path, name: str, pbtxt: str, model_py: str, **kwargs: Any) -> Any:
    folder = write_model(repo, name, pbtxt, {"1/model.py": model_py})
    return PythonBackend().create_instance(context_for(folder, **kwargs))


def test_registry_returns_python_backend() -> None:
    backend = get_backend("python")
    assert backend.name == "python" and backend.default_model_filename == "model.py"


def test_every_datatype_round_trips(repo: Path) -> None:
    pytest.importorskip("torch")
    instance = _instance(repo, "echo", _echo_pbtxt(), ECHO)
    inputs = {f"IN_{wire}": _sample(wire) for wire in WIRE_TYPES}
    [result] = instance.execute([request(inputs)])  # type: ignore[arg-type]
    assert result.error is None
    outputs = {t.name: t for t in result.outputs}
    for wire in WIRE_TYPES:
        out, sent = outputs[f"OUT_{wire}"], inputs[f"IN_{wire}"]
        assert out.datatype == wire
        if wire == "BF16":
            import torch

            bits = torch.from_numpy(out.array.view(np.int16)).view(torch.bfloat16)
            assert bits.float().tolist() == [3.0, -4.0, 0.5]
        else:
            assert out.array.dtype == sent.array.dtype
            assert out.array.tolist() == sent.array.tolist()
    instance.close()


INIT_ARGS = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.model_dir = pb_utils.get_model_dir()

    def execute(self, requests):
        blob = json.dumps({"args": self.args, "dir": self.model_dir}).encode()
        out = pb_utils.Tensor("ARGS", np.array([blob], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

ARGS_PBTXT = """
name: "args_model"
backend: "python"
max_batch_size: 2
input { name: "X" data_type: TYPE_INT64 dims: [1] }
output { name: "ARGS" data_type: TYPE_STRING dims: [1] }
"""


def test_initialize_receives_triton_args(repo: Path) -> None:
    instance = _instance(repo, "args_model", ARGS_PBTXT, INIT_ARGS, kind="KIND_GPU", device_id=3)
    [result] = instance.execute([request({"X": np.array([[1]], dtype=np.int64)})])
    data = json.loads(result.outputs[0].array[0])
    args = data["args"]
    assert set(args) == {
        "model_config", "model_instance_kind", "model_instance_name",
        "model_instance_device_id", "model_repository", "model_version", "model_name",
    }  # fmt: skip
    assert args["model_instance_kind"] == "GPU"
    assert args["model_instance_device_id"] == "3"
    assert args["model_instance_name"] == "args_model_0_0"
    assert args["model_repository"] == str(repo / "args_model")
    assert args["model_version"] == "1" and args["model_name"] == "args_model"
    config = json.loads(args["model_config"])
    assert config["max_batch_size"] == 2
    tensor = config["input"][0]
    assert (tensor["name"], tensor["data_type"], tensor["dims"]) == ("X", "TYPE_INT64", [1])
    assert tensor["optional"] is False and config["output"][0]["name"] == "ARGS"
    assert data["dir"] == str(repo / "args_model" / "1")
    instance.close()


ASYNC_MODEL = """
import asyncio
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)]))
        return responses
"""

XY_PBTXT = """
backend: "python"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: [2] }
output { name: "Y" data_type: TYPE_FP32 dims: [2] }
"""

#: the workbench-only parameter that keeps the instance in this process
IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'


def test_async_execute(repo: Path) -> None:
    instance = _instance(repo, "async_model", XY_PBTXT, ASYNC_MODEL)
    x = np.array([[1, 2]], dtype=np.float32)
    for _ in range(2):  # the private loop survives between calls
        results = instance.execute([request({"X": x}), request({"X": x * 10})])
        assert [r.outputs[0].array.tolist() for r in results] == [[[2, 3]], [[11, 21]]]
    instance.close()


ERRORS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        mode = requests[0].parameters()
        if "raise" in mode:
            raise pb_utils.TritonModelException("boom")
        if "count" in mode:
            return []
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if x[0, 0] < 0:
                error = pb_utils.TritonError("negative", pb_utils.TritonError.NOT_FOUND)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
        return responses
"""


def test_error_in_one_response_fails_that_request_only(repo: Path) -> None:
    instance = _instance(repo, "errors", XY_PBTXT, ERRORS_MODEL)
    good, bad = np.ones((1, 2), np.float32), -np.ones((1, 2), np.float32)
    results = instance.execute([request({"X": good}), request({"X": bad})])
    assert results[0].error is None and results[0].outputs[0].array.tolist() == [[1, 1]]
    assert isinstance(results[1].error, NotFoundError)
    assert results[1].error.message == "negative"
    assert results[1].error_is_response  # Triton counts it as a success in the statistics


def test_exception_in_execute_fails_every_request(repo: Path) -> None:
    instance = _instance(repo, "errors", XY_PBTXT, ERRORS_MODEL)
    x = np.ones((1, 2), np.float32)
    results = instance.execute([request({"X": x}, mode="raise"), request({"X": x})])
    assert all(isinstance(r.error, InternalError) for r in results)
    # as Triton's python backend: the instance's name, the exception, the model's frames
    assert str(results[0].error).startswith(
        "Failed to process the request(s) for model 'errors_0_0', message: "
    )
    assert "boom\n\nAt:\n" in str(results[0].error) and "model.py(" in str(results[0].error)
    assert not any(r.error_is_response for r in results)


def test_wrong_number_of_responses(repo: Path) -> None:
    instance = _instance(repo, "errors", XY_PBTXT, ERRORS_MODEL)
    x = np.ones((1, 2), np.float32)
    results = instance.execute([request({"X": x}, mode="count"), request({"X": x})])
    assert all("expected 2 responses, got 0" in str(r.error) for r in results)


MULTI_OUT = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            names = request.requested_output_names()
            x = request.inputs()[0].as_numpy()
            outs = [pb_utils.Tensor("A", x.astype(np.int64)), pb_utils.Tensor("B", x)]
            responses.append(pb_utils.InferenceResponse([o for o in outs if o.name() in names]))
        return responses
"""

MULTI_PBTXT = """
backend: "python"
input { name: "X" data_type: TYPE_FP32 dims: [2] }
output { name: "A" data_type: TYPE_INT32 dims: [2] }
output { name: "B" data_type: TYPE_FP32 dims: [2] }
"""


def test_requested_outputs_and_declared_dtype(repo: Path) -> None:
    instance = _instance(repo, "multi", MULTI_PBTXT, MULTI_OUT)
    x = np.array([1.0, 2.0], np.float32)
    [every, only_a] = instance.execute([request({"X": x}), request({"X": x}, ["A"])])
    assert [t.name for t in every.outputs] == ["A", "B"]
    assert [t.name for t in only_a.outputs] == ["A"]
    assert only_a.outputs[0].datatype == "INT32" and only_a.outputs[0].array.dtype == np.int32


AUTO_COMPLETE = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [4]})
        auto_complete_model_config.add_output(
            {"name": "Y", "data_type": "TYPE_STRING", "dims": [-1]}
        )
        auto_complete_model_config.set_max_batch_size(16)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return []
"""


def test_auto_complete_config(repo: Path) -> None:
    folder = write_model(repo, "auto", 'backend: "python"', {"1/model.py": AUTO_COMPLETE})
    config = load_config(folder)
    PythonBackend().auto_complete(config, folder, folder / "1")
    assert config.max_batch_size == 16
    assert config.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in config.input] == [("X", [4])]
    assert config.output[0].data_type == model_config_pb2.TYPE_STRING


def test_auto_complete_rejects_smaller_max_batch_size(repo: Path) -> None:
    pbtxt = 'backend: "python"\nmax_batch_size: 32'
    folder = write_model(repo, "auto", pbtxt, {"1/model.py": AUTO_COMPLETE})
    with pytest.raises(ConfigError, match="configuration specified max_batch_size 32"):
        PythonBackend().auto_complete(load_config(folder), folder, folder / "1")


BLS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            bls = pb_utils.InferenceRequest(
                model_name="double", inputs=[x], requested_output_names=["Y"]
            )
            first = bls.exec()
            doubled = pb_utils.get_output_tensor_by_name(first, "Y").as_numpy()
            second = await pb_utils.InferenceRequest(
                model_name="double",
                inputs=[pb_utils.Tensor("X", doubled)],
                requested_output_names=["Y"],
            ).async_exec()
            missing = pb_utils.InferenceRequest(
                model_name="nope", inputs=[x], requested_output_names=[]
            ).exec()
            assert missing.has_error() and missing.error().code() == pb_utils.TritonError.NOT_FOUND
            assert pb_utils.is_model_ready("double")
            y = pb_utils.get_output_tensor_by_name(second, "Y")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y.as_numpy())]))
        return responses
"""


def test_bls_through_the_instance_client(repo: Path) -> None:
    client = FakeClient()
    instance = _instance(repo, "bls", XY_PBTXT, BLS_MODEL, client=client)
    [result] = instance.execute([request({"X": np.array([[1, 2]], np.float32)})])
    assert result.error is None, result.error
    assert result.outputs[0].array.tolist() == [[4, 8]]
    assert client.calls == [("double", ["Y"]), ("double", ["Y"]), ("nope", None)]
    instance.close()


BLS_REQUEST_ID_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X")

        def double(**options):
            return pb_utils.InferenceRequest(
                model_name="double", inputs=[x], requested_output_names=["Y"], **options
            )

        double(request_id="exec").exec()
        await double(request_id="async_exec").async_exec()
        list(double(request_id="decoupled").exec(decoupled=True))
        list(await double(request_id="async_decoupled").async_exec(decoupled=True))
        double().exec()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.as_numpy())])]
"""


@pytest.mark.parametrize("in_process", [False, True], ids=["stub", "in_process"])
def test_a_bls_requests_own_id_reaches_the_client(repo: Path, in_process: bool) -> None:
    client = FakeClient()
    pbtxt = XY_PBTXT + (IN_PROCESS if in_process else "")
    instance = _instance(repo, "bls_id", pbtxt, BLS_REQUEST_ID_MODEL, client=client)
    [result] = instance.execute([request({"X": np.ones((1, 2), np.float32)}, request_id="caller")])
    assert result.error is None, result.error
    # each call's own id, "" when it has none: never the calling request's
    assert client.request_ids == ["exec", "async_exec", "decoupled", "async_decoupled", ""]
    instance.close()


SENDER_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = request.inputs()[0].as_numpy()
            sender.send(
                pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
"""


def test_response_sender_in_non_decoupled_model(repo: Path) -> None:
    instance = _instance(repo, "sender", XY_PBTXT, SENDER_MODEL)
    [result] = instance.execute([request({"X": np.ones((1, 2), np.float32)})])
    assert result.outputs[0].array.tolist() == [[1, 1]]


COUNTER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

VALUE = {value}


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("Y", np.full((1, 2), VALUE, np.float32))])
            for _ in requests
        ]

    def finalize(self):
        pb_utils.Logger.log_info("finalized {value}")
        FINALIZED.append(VALUE)


FINALIZED = []
"""


@pytest.mark.parametrize("in_process", [False, True], ids=["process", "in_process"])
def test_models_with_same_file_name_do_not_clash(
    repo: Path, in_process: bool, caplog: pytest.LogCaptureFixture
) -> None:
    extra = IN_PROCESS if in_process else ""
    first = _instance(repo, "one", XY_PBTXT + extra, COUNTER_MODEL.format(value=1))
    second = _instance(repo, "two", XY_PBTXT + extra, COUNTER_MODEL.format(value=2))
    x = {"X": np.ones((1, 2), np.float32)}
    assert first.execute([request(x)])[0].outputs[0].array[0, 0] == 1
    assert second.execute([request(x)])[0].outputs[0].array[0, 0] == 2
    with caplog.at_level("INFO", logger="workbench.python_model"):
        first.close()
        second.close()
    # finalize ran in each model (its log line reaches the server's logging from a stub)
    assert [r.getMessage() for r in caplog.records] == ["finalized 1", "finalized 2"]


def test_initialize_failure_is_internal_error(repo: Path) -> None:
    model = """
class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("bad weights")
"""
    with pytest.raises(InternalError, match="ValueError: bad weights"):
        _instance(repo, "broken", XY_PBTXT, model)


def test_missing_model_file_and_syntax_error(repo: Path) -> None:
    folder = write_model(repo, "empty", XY_PBTXT, {"1/other.py": ""})
    with pytest.raises(NotFoundError):
        PythonBackend().create_instance(context_for(folder))
    with pytest.raises(InternalError, match="SyntaxError"):
        _instance(repo, "syntax", XY_PBTXT, "def broken(:\n")


def test_string_numpy_output_is_rejected_like_triton(repo: Path) -> None:
    model = ERRORS_MODEL.replace('pb_utils.Tensor("Y", x)', 'pb_utils.Tensor("Y", np.array(["s"]))')
    instance = _instance(repo, "unicode", XY_PBTXT, model)
    [result] = instance.execute([request({"X": np.ones((1, 2), np.float32)})])
    assert isinstance(result.error, InternalError)
    assert "NumPy dtype is not supported" in str(result.error)
    assert not isinstance(result.error, InvalidArgumentError)
