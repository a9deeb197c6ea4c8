"""fill_defaults: Triton's auto-completion and normalisation, checked against real Triton."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.config import (
    detect_backend,
    fill_defaults,
    parse_pbtxt,
    read_config,
    to_json_dict,
    validate,
)

ASSETS = Path(__file__).parents[1] / "assets" / "configs"
TRITON = ASSETS / "triton_2_51"
CAPTURED = sorted(path.stem for path in TRITON.glob("*.json"))

KIND_CPU, KIND_GPU = "KIND_CPU", "KIND_GPU"


def filled(text: str, **kwargs: object) -> dict:
    config = parse_pbtxt(text)
    fill_defaults(config, **kwargs)  # type: ignore[arg-type]
    return to_json_dict(config)


def test_captured_cases_exist() -> None:
    assert CAPTURED == ["ens", "pydb", "pymin", "pyplain", "pyseq"]


@pytest.mark.parametrize("model", CAPTURED)
def test_matches_real_triton_config_endpoint(model: str) -> None:
    config = read_config(TRITON / f"{model}.pbtxt")
    fill_defaults(config, model_name=model)
    expected = json.loads((TRITON / f"{model}.json").read_text())
    assert to_json_dict(config) == expected


CONFORMANCE = Path(__file__).parents[1] / "assets" / "conformance_repo"
GOLDEN = Path(__file__).parents[1] / "assets" / "conformance_golden"
CONFORMANCE_MODELS = ["add_one", "echo_bytes", "fails_on_negative", "identity_all"]


@pytest.mark.parametrize("model", CONFORMANCE_MODELS)
def test_matches_the_conformance_golden_configs(model: str) -> None:
    """The shared real-Triton captures of the conformance repository (HTTP /config bodies)."""
    config = read_config(CONFORMANCE / model / "config.pbtxt")
    fill_defaults(config, model_name=model, model_path=CONFORMANCE / model)
    golden = json.loads((GOLDEN / f"model_config_{model}.json").read_text())
    assert to_json_dict(config) == golden["response"]["body"]
    assert validate(config, model_name=model, model_path=CONFORMANCE / model) == []


# pyseq differs in key order only: Triton prints initial_state's "name" before the oneof
# "zero_data"; we follow the schema order. Values are equal (test above).
@pytest.mark.parametrize("model", ["pymin", "pyplain", "pydb", "ens"])
def test_key_order_matches_real_triton(model: str) -> None:
    config = read_config(TRITON / f"{model}.pbtxt")
    fill_defaults(config, model_name=model)
    expected = json.loads((TRITON / f"{model}.json").read_text())
    assert json.dumps(to_json_dict(config)) == json.dumps(expected)


@pytest.mark.parametrize("model", CAPTURED)
def test_completed_configs_are_valid(model: str) -> None:
    config = read_config(TRITON / f"{model}.pbtxt")
    fill_defaults(config, model_name=model)
    assert validate(config, model_name=model) == []


def test_is_idempotent() -> None:
    config = read_config(ASSETS / "onnx_dynamic_batching.pbtxt")
    fill_defaults(config, gpu_count=1)
    once = to_json_dict(config)
    fill_defaults(config, gpu_count=1)
    assert to_json_dict(config) == once


def test_minimal_python_model() -> None:
    data = filled('name: "m" backend: "python"')
    assert data["default_model_filename"] == "model.py"
    assert data["platform"] == ""
    assert data["version_policy"] == {"latest": {"num_versions": 1}}
    assert data["optimization"]["input_pinned_memory"] == {"enable": True}
    assert data["optimization"]["output_pinned_memory"] == {"enable": True}
    group = data["instance_group"]
    assert [(g["name"], g["kind"], g["count"], g["gpus"]) for g in group] == [
        ("m", KIND_CPU, 1, [])
    ]


def test_name_comes_from_the_model_directory_when_empty() -> None:
    assert filled('backend: "python"', model_name="dir")["name"] == "dir"
    assert filled('name: "kept" backend: "python"', model_name="dir")["name"] == "kept"


def test_default_group_with_gpus() -> None:
    data = filled('name: "m" backend: "python"', gpu_count=2)
    assert data["instance_group"][0]["kind"] == KIND_GPU
    assert data["instance_group"][0]["gpus"] == [0, 1]
    assert data["instance_group"][0]["count"] == 1


def test_instance_groups_are_named_counted_and_resolved() -> None:
    data = filled(
        """name: "m" backend: "python"
        instance_group [{ kind: KIND_AUTO }, { kind: KIND_AUTO gpus: [5] },
                        { name: "mine" kind: KIND_GPU count: 3 }, { kind: KIND_CPU count: -2 }]
        """,
        gpu_count=2,
    )
    groups = [(g["name"], g["kind"], g["count"], g["gpus"]) for g in data["instance_group"]]
    assert groups == [
        ("m_0", KIND_GPU, 1, [0, 1]),
        ("m_1", KIND_CPU, 1, [5]),  # an unknown GPU id turns KIND_AUTO into CPU
        ("mine", KIND_GPU, 3, [0, 1]),
        ("m_3", KIND_CPU, 1, []),  # count < 1 takes the default, as Triton does
    ]


def test_onnxruntime_fills_platform_and_two_cpu_instances() -> None:
    data = filled('name: "m" backend: "onnxruntime"')
    assert data["platform"] == "onnxruntime_onnx"
    assert data["default_model_filename"] == "model.onnx"
    assert data["instance_group"][0]["count"] == 2
    assert (
        filled('name: "m" backend: "onnxruntime"', gpu_count=1)["instance_group"][0]["count"] == 1
    )


@pytest.mark.parametrize(
    ("text", "backend", "platform", "filename"),
    [
        ('platform: "onnxruntime_onnx"', "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ('platform: "tensorrt_plan"', "tensorrt", "tensorrt_plan", "model.plan"),
        ('backend: "tensorrt"', "tensorrt", "tensorrt_plan", "model.plan"),
        ('backend: "pytorch"', "pytorch", "pytorch_libtorch", "model.pt"),
        # Triton fills no file name when the pytorch platform was given (kept quirk)
        ('platform: "pytorch_libtorch"', "pytorch", "pytorch_libtorch", ""),
        ('platform: "torch_aoti"', "pytorch", "torch_aoti", "model.pt2"),
        ('default_model_filename: "model.onnx"', "onnxruntime", "onnxruntime_onnx", "model.onnx"),
        ('default_model_filename: "model.py"', "python", "", "model.py"),
        ('backend: "python" default_model_filename: "run.py"', "python", "", "run.py"),
        ('backend: "custom"', "custom", "", ""),
    ],
)
def test_backend_platform_and_file_name(
    text: str, backend: str, platform: str, filename: str
) -> None:
    data = filled(f'name: "m" {text}')
    assert (data["backend"], data["platform"], data["default_model_filename"]) == (
        backend,
        platform,
        filename,
    )


@pytest.mark.parametrize(
    ("filename", "backend", "platform"),
    [
        ("model.py", "python", ""),
        ("model.onnx", "onnxruntime", "onnxruntime_onnx"),
        ("model.plan", "tensorrt", "tensorrt_plan"),
        ("model.pt", "pytorch", "pytorch_libtorch"),
        ("weights.bin", "", ""),
    ],
)
def test_backend_from_the_first_version_folder(
    tmp_path: Path, filename: str, backend: str, platform: str
) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / filename).write_text("")
    config = parse_pbtxt('name: "m"')
    detect_backend(config, tmp_path)
    assert (config.backend, config.platform) == (backend, platform)


def test_backend_is_not_guessed_when_the_config_says_something(tmp_path: Path) -> None:
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.py").write_text("")
    config = parse_pbtxt('name: "m" default_model_filename: "net.bin"')
    fill_defaults(config, model_path=tmp_path)
    assert config.backend == ""


def test_dynamic_batching_preferred_size_defaults_to_max_batch_size() -> None:
    data = filled('name: "m" backend: "python" max_batch_size: 16 dynamic_batching {}')
    assert data["dynamic_batching"]["preferred_batch_size"] == [16]
    data = filled('name: "m" backend: "python" dynamic_batching {}')
    assert data["dynamic_batching"]["preferred_batch_size"] == []
    data = filled('name: "m" backend: "python" max_batch_size: 16 ')
    assert "dynamic_batching" not in data


def test_sequence_batching_defaults() -> None:
    data = filled('name: "m" backend: "python" max_batch_size: 4 sequence_batching { oldest { } }')
    sequence = data["sequence_batching"]
    assert sequence["max_sequence_idle_microseconds"] == 1_000_000
    assert sequence["oldest"]["preferred_batch_size"] == [4]
    data = filled(
        'name: "m" backend: "python" sequence_batching { max_sequence_idle_microseconds: 5 }'
    )
    assert data["sequence_batching"]["max_sequence_idle_microseconds"] == 5


def test_ensemble_gets_no_instances_or_optimization() -> None:
    config = read_config(ASSETS / "ensemble_pipeline.pbtxt")
    fill_defaults(config, gpu_count=4)
    data = to_json_dict(config)
    assert data["instance_group"] == []
    assert "optimization" not in data
    assert data["backend"] == ""
    assert data["default_model_filename"] == ""
    assert data["model_transaction_policy"] == {"decoupled": False}
    assert validate(config, model_name="pipeline") == []


def test_explicit_settings_are_kept() -> None:
    data = filled(
        """name: "m" backend: "python" max_batch_size: 8
        version_policy { all { } }
        dynamic_batching { preferred_batch_size: [2] }
        optimization { input_pinned_memory { enable: false } }
        """
    )
    assert data["version_policy"] == {"all": {}}
    assert data["dynamic_batching"]["preferred_batch_size"] == [2]
    assert data["optimization"]["input_pinned_memory"] == {"enable": False}
    assert data["optimization"]["output_pinned_memory"] == {"enable": True}
