"""The ``triton_python_backend_utils`` shim on its own."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.backends.python import pb_utils
from workbench.backends.python._model_config import ModelConfig
from workbench.backends.python._model_metrics import METRIC_FAMILIES


def test_type_tables_match_triton() -> None:
    assert pb_utils.numpy_to_triton_type(np.float32) == 11
    assert pb_utils.numpy_to_triton_type(np.bool_) == 1
    assert pb_utils.numpy_to_triton_type(np.object_) == 13
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.str_) is None
    assert pb_utils.triton_to_numpy_type(11) is np.float32
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    assert pb_utils.triton_string_to_numpy("TYPE_BOOL") is bool
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_


def test_bytes_serialization_round_trip() -> None:
    array = np.array([[b"ab", "é"], [b"", 7]], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(array)
    assert encoded[:6] == b"\x02\x00\x00\x00ab"
    decoded = pb_utils.deserialize_bytes_tensor(encoded)
    assert decoded.tolist() == [b"ab", "é".encode(), b"", b"7"]
    assert pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)) == ()


def test_tensor_api() -> None:
    tensor = pb_utils.Tensor("X", np.arange(6, dtype=np.int16).reshape(2, 3))
    assert (tensor.name(), tensor.triton_dtype(), tensor.shape()) == ("X", 7, [2, 3])
    assert tensor.is_cpu()
    again = pb_utils.Tensor.from_dlpack("Y", tensor.to_dlpack())
    assert again.as_numpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(pb_utils.TritonModelException, match="not supported"):
        pb_utils.Tensor("S", np.array(["unicode"]))
    with pytest.raises(pb_utils.TritonModelException, match="empty string"):
        pb_utils.Tensor("", np.zeros(1))
    strings = pb_utils.Tensor("B", np.array([b"a"], dtype=np.object_))
    with pytest.raises(pb_utils.TritonModelException, match="string tensors"):
        strings.to_dlpack()


def test_from_dlpack_accepts_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    tensor = pb_utils.Tensor.from_dlpack("T", torch.arange(3, dtype=torch.float32))
    assert tensor.triton_dtype() == 11 and tensor.as_numpy().tolist() == [0, 1, 2]
    bf16 = pb_utils.Tensor.from_dlpack("H", torch.ones(2, dtype=torch.bfloat16))
    assert bf16.triton_dtype() == 14
    with pytest.raises(pb_utils.TritonModelException, match="BF16"):
        bf16.as_numpy()


def test_errors() -> None:
    error = pb_utils.TritonError("nope")
    assert (error.message(), error.code()) == ("nope", pb_utils.TritonError.INTERNAL)
    codes = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE"]
    codes += ["UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED"]
    assert [getattr(pb_utils.TritonError, c) for c in codes] == list(range(8))
    assert pb_utils.TritonModelException("m").message() == "m"


def test_request_and_response_helpers() -> None:
    x = pb_utils.Tensor("X", np.zeros(1, np.float32))
    request = pb_utils.InferenceRequest(
        model_name="m", inputs=[x], requested_output_names=["Y"], parameters={"k": 1}
    )
    assert pb_utils.get_input_tensor_by_name(request, "X") is x
    assert pb_utils.get_input_tensor_by_name(request, "Z") is None
    assert json.loads(request.parameters()) == {"k": 1}
    assert (request.request_id(), request.correlation_id(), request.flags()) == ("", 0, 0)
    response = pb_utils.InferenceResponse(output_tensors=[x], parameters={"p": "v"})
    assert pb_utils.get_output_tensor_by_name(response, "X") is x
    assert not response.has_error() and json.loads(response.parameters()) == {"p": "v"}
    with pytest.raises(pb_utils.TritonModelException, match="BLS requests need"):
        request.exec()
    with pytest.raises(pb_utils.TritonModelException):
        pb_utils.InferenceResponse(output_tensors=[np.zeros(1)])  # type: ignore[list-item]


def test_config_lookups() -> None:
    config = {"input": [{"name": "A", "dims": [1]}], "output": [{"name": "B"}]}
    assert pb_utils.get_input_config_by_name(config, "A") == {"name": "A", "dims": [1]}
    assert pb_utils.get_output_config_by_name(config, "B") == {"name": "B"}
    assert pb_utils.get_output_config_by_name(config, "A") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(config)


def test_model_config_checks() -> None:
    config = ModelConfig(json.dumps({"name": "m", "max_batch_size": 0, "input": []}))
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2]})
    config.add_input({"name": "A", "data_type": "TYPE_FP32", "dims": [2]})
    assert len(config.as_dict()["input"]) == 1
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32"):
        config.add_input({"name": "A", "data_type": "TYPE_INT8", "dims": [2]})
    with pytest.raises(ValueError, match="missing 'dims' property"):
        config.add_output({"name": "B", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="contains property other than"):
        config.add_output({"name": "B", "data_type": "TYPE_FP32", "dims": [1], "x": 1})
    config.set_model_transaction_policy({"decoupled": False})
    with pytest.raises(ValueError, match="trying to change decoupled"):
        config.set_model_transaction_policy({"decoupled": True})
    sequence = ModelConfig(
        {"name": "s", "sequence_batching": {"max_sequence_idle_microseconds": 1}}
    )
    with pytest.raises(ValueError, match="sequence_batching"):
        sequence.set_dynamic_batching()


def test_logger_and_metrics(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("DEBUG", logger="workbench.python_model"):
        pb_utils.Logger.log_info("hello")
        pb_utils.Logger.log("careful", pb_utils.Logger.WARNING)
        pb_utils.Logger.log_verbose("details")
    assert [r.levelname for r in caplog.records] == ["INFO", "WARNING", "DEBUG"]
    family = pb_utils.MetricFamily("requests_total", "requests", pb_utils.MetricFamily.COUNTER)
    metric = family.Metric(labels={"model": "m"})
    metric.increment(2)
    assert metric.value() == 2 and METRIC_FAMILIES["requests_total"] is family
    with pytest.raises(ValueError):
        metric.set(1)
    gauge = pb_utils.MetricFamily("g", "gauge", pb_utils.MetricFamily.GAUGE).Metric()
    gauge.set(5)
    assert gauge.value() == 5
