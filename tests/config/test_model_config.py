"""pbtxt and JSON reading/writing of model configurations."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import workbench.config as config_layer
from workbench.config import (
    ModelConfig,
    backend_name,
    from_json,
    is_ensemble,
    parse_pbtxt,
    read_config,
    to_json_dict,
    to_pbtxt,
    write_config,
)
from workbench.errors import ConfigError, InvalidArgumentError

ASSETS = Path(__file__).parents[1] / "assets" / "configs"
GOLDEN = ["python_add_one.pbtxt", "onnx_dynamic_batching.pbtxt", "ensemble_pipeline.pbtxt"]


def test_public_api_is_exported() -> None:
    assert set(config_layer.__all__) >= {
        "ModelConfig",
        "Problem",
        "backend_name",
        "check",
        "fill_defaults",
        "from_json",
        "is_ensemble",
        "parse_pbtxt",
        "read_config",
        "to_json_dict",
        "to_pbtxt",
        "validate",
        "write_config",
    }
    from tritonclient.grpc import model_config_pb2

    assert ModelConfig is model_config_pb2.ModelConfig


def test_read_config_parses_every_field() -> None:
    config = read_config(ASSETS / "python_add_one.pbtxt")
    assert config.name == "add_one"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert [i.name for i in config.input] == ["INPUT0"]
    assert list(config.input[0].dims) == [16]
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert config.instance_group[0].count == 2
    assert config.parameters["EXECUTION_ENV_PATH"].string_value.endswith("env.tar.gz")


@pytest.mark.parametrize("name", GOLDEN)
def test_pbtxt_round_trip_is_lossless_and_stable(name: str) -> None:
    config = read_config(ASSETS / name)
    text = to_pbtxt(config)
    again = parse_pbtxt(text)
    assert again == config
    assert to_pbtxt(again) == text


def test_to_pbtxt_is_readable_text_format() -> None:
    config = parse_pbtxt('name: "m"\nmax_batch_size: 2\ninput { name: "x" dims: 3 }')
    assert to_pbtxt(config) == 'name: "m"\nmax_batch_size: 2\ninput {\n  name: "x"\n  dims: 3\n}\n'


def test_syntax_error_names_source_line_and_column() -> None:
    path = ASSETS / "invalid" / "syntax_error.pbtxt"
    with pytest.raises(ConfigError) as info:
        read_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3:")
    line, column = message.removeprefix(f"{path}:").split(":")[:2]
    assert (int(line), int(column)) == (3, 19)


def test_unknown_field_names_the_field_and_position() -> None:
    text = (ASSETS / "invalid" / "unknown_field.pbtxt").read_text()
    with pytest.raises(ConfigError) as info:
        parse_pbtxt(text, source="model_repository/typo/config.pbtxt")
    message = str(info.value)
    assert message.startswith("model_repository/typo/config.pbtxt:4:")
    assert '"dimz"' in message
    assert isinstance(info.value, InvalidArgumentError)


def test_parse_error_default_source() -> None:
    with pytest.raises(ConfigError, match=r"^<string>:1:\d+: "):
        parse_pbtxt("max_batch_size: banana")


def test_read_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read model configuration"):
        read_config(tmp_path / "config.pbtxt")


def test_bytes_that_are_not_utf8_read_as_the_server_reads_them(tmp_path: Path) -> None:
    # as tritonserver 2.51 takes them (tests/security/test_bad_requests.py): in a comment and
    # in a string value they load; in a field name they fail the parse, as a ConfigError
    path = tmp_path / "config.pbtxt"
    path.write_bytes(
        b'name: "m"  # caf\xe9 \xff\nparameters { key: "k" value { string_value: "\xe9" } }'
    )
    config = read_config(path)
    assert (config.name, config.parameters["k"].string_value) == ("m", "\ufffd")
    path.write_bytes(b'name: "m"\nna\xffme: "x"')
    with pytest.raises(ConfigError, match=f'^{re.escape(str(path))}:2:1: .*no field named "na"'):
        read_config(path)


def test_write_config_is_atomic_and_keeps_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "old"\n')
    write_config(parse_pbtxt('name: "new"'), path)
    assert read_config(path).name == "new"
    assert (tmp_path / "config.pbtxt.bak").read_text() == 'name: "old"\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.pbtxt", "config.pbtxt.bak"]


def test_write_config_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "old"\n')
    path.chmod(0o640)
    write_config(parse_pbtxt('name: "new"'), path)
    assert path.stat().st_mode & 0o777 == 0o640


def test_write_config_without_backup(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    write_config(parse_pbtxt('name: "a"'), path, backup=False)
    write_config(parse_pbtxt('name: "b"'), path, backup=False)
    assert read_config(path).name == "b"
    assert [p.name for p in tmp_path.iterdir()] == ["config.pbtxt"]


def test_write_config_failure_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "old"\n')
    with pytest.raises(AttributeError):
        write_config(object(), path)  # type: ignore[arg-type]
    assert path.read_text() == 'name: "old"\n'
    assert [p.name for p in tmp_path.iterdir()] == ["config.pbtxt"]


def test_json_prints_int64_fields_as_numbers() -> None:
    data = to_json_dict(read_config(ASSETS / "onnx_dynamic_batching.pbtxt"))
    assert data["input"][0]["dims"] == [3, 224, 224]
    assert data["output"][0]["dims"] == [-1, 1000]
    assert data["output"][0]["reshape"] == {"shape": [-1, 10, 100]}
    assert data["version_policy"] == {"specific": {"versions": [1, 3]}}
    batching = data["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 5000
    assert batching["priority_levels"] == 2
    assert batching["default_priority_level"] == 2
    assert batching["default_queue_policy"]["default_timeout_microseconds"] == 2000000
    # map keys stay strings (JSON keys), values are fixed inside the map
    policy = batching["priority_queue_policy"]["1"]
    assert policy["default_timeout_microseconds"] == 9000000000
    assert data["model_warmup"][0]["inputs"]["images"]["dims"] == [3, 224, 224]
    assert data["max_batch_size"] == 32


def test_json_uses_proto_names_enum_names_and_prints_defaults() -> None:
    data = to_json_dict(read_config(ASSETS / "onnx_dynamic_batching.pbtxt"))
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["input"][0]["format"] == "FORMAT_NCHW"
    assert data["input"][1]["format"] == "FORMAT_NONE"
    assert data["input"][0]["is_shape_tensor"] is False
    assert data["backend"] == ""
    assert data["batch_input"] == []
    assert data["parameters"] == {}
    assert data["instance_group"][0]["kind"] == "KIND_AUTO"
    assert data["instance_group"][0]["gpus"] == []
    assert "sequence_batching" not in data  # unset messages are left out, as in Triton
    assert list(data)[:6] == [
        "name",
        "platform",
        "backend",
        "runtime",
        "version_policy",
        "max_batch_size",
    ]
    json.dumps(data)  # plain JSON types only


def test_json_ensemble_model_version_is_a_number() -> None:
    data = to_json_dict(read_config(ASSETS / "ensemble_pipeline.pbtxt"))
    versions = [step["model_version"] for step in data["ensemble_scheduling"]["step"]]
    assert versions == [-1, 2, -1]
    assert data["ensemble_scheduling"]["step"][2]["input_map"] == {"SCORES": "scores", "RAW": "RAW"}


def test_json_keeps_the_int64_fields_triton_leaves_as_strings() -> None:
    config = parse_pbtxt(
        """
        sequence_batching { state [{ input_name: "a" output_name: "b" dims: [2]
          initial_state { name: "i" dims: [2] zero_data: true } }] }
        instance_group [{ secondary_devices [{ device_id: 7 }] }]
        """
    )
    data = to_json_dict(config)
    state = data["sequence_batching"]["state"][0]
    assert state["dims"] == [2]
    assert state["initial_state"][0]["dims"] == ["2"]
    assert data["instance_group"][0]["secondary_devices"][0]["device_id"] == "7"


@pytest.mark.parametrize("name", GOLDEN)
def test_json_round_trip(name: str) -> None:
    config = read_config(ASSETS / name)
    data = to_json_dict(config)
    assert from_json(data) == config
    assert from_json(json.dumps(data)) == config


def test_from_json_accepts_int64_as_strings_or_numbers() -> None:
    config = from_json(
        {
            "name": "m",
            "max_batch_size": 4,
            "input": [{"name": "x", "dims": ["3", 4]}],
            "dynamic_batching": {"max_queue_delay_microseconds": "100"},
        }
    )
    assert list(config.input[0].dims) == [3, 4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be an object"),
        ({"nmae": "x"}, 'no field named "nmae"'),
        ({"input": [{"data_type": "TYPE_FOO"}]}, "TYPE_FOO"),
        ({"max_batch_size": "many"}, "max_batch_size"),
    ],
)
def test_from_json_errors_are_config_errors(data: str | dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        from_json(data)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "backend", "ensemble"),
    [
        ('backend: "python"', "python", False),
        ('platform: "onnxruntime_onnx"', "onnxruntime", False),
        ('backend: "onnxruntime"', "onnxruntime", False),
        ('platform: "pytorch_libtorch"', "pytorch", False),
        ('platform: "libtorch"', "pytorch", False),
        ('platform: "tensorrt_plan"', "tensorrt", False),
        ('platform: "ensemble"', "ensemble", True),
        ('backend: "identity"', "identity", False),
        ("", "", False),
    ],
)
def test_backend_name_and_is_ensemble(text: str, backend: str, ensemble: bool) -> None:
    config = parse_pbtxt(text)
    assert backend_name(config) == backend
    assert is_ensemble(config) is ensemble
