"""validate/check: each rule names model and field, and stays quiet on valid configs."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf import text_format

from workbench.config import ModelConfig, Problem, check, parse_pbtxt, read_config, validate
from workbench.errors import ConfigError

ASSETS = Path(__file__).parents[1] / "assets" / "configs"

BASE = """
name: "m"
backend: "python"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]
"""

ENSEMBLE = """
name: "e"
platform: "ensemble"
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
"""


def base(extra: str = "") -> ModelConfig:
    """BASE with ``extra`` merged over it (later singular fields win)."""
    config = parse_pbtxt(BASE)
    text_format.Merge(extra, config)
    return config


def fields(problems: list[Problem]) -> list[str]:
    return [problem.field for problem in problems]


@pytest.mark.parametrize(
    ("name", "model_name"),
    [
        ("python_add_one.pbtxt", "add_one"),
        ("onnx_dynamic_batching.pbtxt", "resnet"),
        ("ensemble_pipeline.pbtxt", "pipeline"),
    ],
)
def test_golden_configs_are_valid(name: str, model_name: str) -> None:
    config = read_config(ASSETS / name)
    assert validate(config, model_name=model_name) == []
    check(config, model_name=model_name)


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ('name: ""', "name", "'name' is empty"),
        ('backend: ""', "backend", "set 'backend'"),
        ('backend: "" platform: "onnx"', "platform", "unknown platform 'onnx'"),
        ('backend: "onnxruntime" platform: "pytorch_libtorch"', "platform", "does not go with"),
        ('backend: "pytorch" platform: "tensorrt_plan"', "platform", "pytorch_libtorch"),
        ("max_batch_size: -2", "max_batch_size", "'max_batch_size' is -2"),
        ("version_policy { specific { } }", "version_policy.specific.versions", "no versions"),
        ("version_policy { latest { } }", "version_policy.latest.num_versions", "at least 1"),
        ("input [{ data_type: TYPE_FP32 dims: [1] }]", "input[1].name", "input 1 has no 'name'"),
        ('input [{ name: "z" dims: [1] }]', "input[1].data_type", "input 'z' must set"),
        ('input [{ name: "x" data_type: TYPE_FP32 dims: [1] }]', "input[1].name", "input[0]"),
        ('output [{ name: "y" data_type: TYPE_FP32 dims: [1] }]', "output[1].name", "unique"),
        ('input [{ name: "z" data_type: TYPE_FP32 }]', "input[1].dims", "must set 'dims'"),
        ('input [{ name: "z" data_type: TYPE_FP32 dims: [2, 0] }]', "input[1].dims", "[2, 0]"),
        ('output [{ name: "z" data_type: TYPE_FP32 dims: [-2] }]', "output[1].dims", ">= 1"),
        (
            'input [{ name: "z" data_type: TYPE_FP32 dims: [4, 4] reshape { shape: [15] } }]',
            "input[1].reshape.shape",
            "same number of elements",
        ),
        (
            'input [{ name: "z" data_type: TYPE_FP32 dims: [2, -1] reshape { shape: [2, 3] } }]',
            "input[1].reshape.shape",
            "reshape [2, 3]",
        ),
        (
            'input [{ name: "z" data_type: TYPE_FP32 dims: [2] reshape { shape: [0] } }]',
            "input[1].reshape.shape",
            ">= 1, or -1",
        ),
        (
            'input [{ name: "z" data_type: TYPE_FP32 format: FORMAT_NHWC dims: [4, 4] }]',
            "input[1].format",
            "FORMAT_NHWC needs exactly 3 dims",
        ),
        (
            'input [{ name: "z" data_type: TYPE_INT32 dims: [2] is_shape_tensor: true }]',
            "input[1].is_shape_tensor",
            "TensorRT",
        ),
        (
            "dynamic_batching { preferred_batch_size: [0] }",
            "dynamic_batching.preferred_batch_size",
            "must be positive",
        ),
        (
            "dynamic_batching { preferred_batch_size: [16] }",
            "dynamic_batching.preferred_batch_size",
            "larger than max_batch_size (8)",
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 0 }",
            "dynamic_batching.default_priority_level",
            "[1, 2]",
        ),
        (
            "dynamic_batching { priority_levels: 2 default_priority_level: 1 "
            "priority_queue_policy { key: 3 value { } } }",
            "dynamic_batching.priority_queue_policy",
            "priority level 3",
        ),
        (
            "dynamic_batching { preserve_ordering: true priority_levels: 2 "
            "default_priority_level: 1 }",
            "dynamic_batching.priority_levels",
            "only one priority level",
        ),
        (
            "dynamic_batching { preserve_ordering: true default_queue_policy "
            "{ timeout_action: DELAY default_timeout_microseconds: 10 } }",
            "dynamic_batching.default_queue_policy.timeout_action",
            "DELAY",
        ),
        (
            "sequence_batching { oldest { preferred_batch_size: [9] } }",
            "sequence_batching.oldest.preferred_batch_size",
            "larger than max_batch_size",
        ),
        (
            "sequence_batching { direct { minimum_slot_utilization: 1.5 } }",
            "sequence_batching.direct.minimum_slot_utilization",
            "(0.0, 1.0]",
        ),
        (
            'sequence_batching { control_input [{ name: "c" control [{ kind: '
            "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 }] }] }",
            "sequence_batching.control_input[0].control",
            "CORRID",
        ),
        ("instance_group [{ count: -1 }]", "instance_group[0].count", "count -1"),
        ("instance_group [{ kind: KIND_CPU gpus: [0] }]", "instance_group[0].gpus", "KIND_CPU"),
        ('instance_group [{ profile: ["0"] }]', "instance_group[0].profile", "TensorRT"),
        (
            "sequence_batching { } response_cache { enable: true }",
            "response_cache.enable",
            "sequence batching",
        ),
        (
            "model_transaction_policy { decoupled: true } response_cache { enable: true }",
            "response_cache.enable",
            "decoupled",
        ),
        (
            'ensemble_scheduling { step [{ model_name: "a" }] }',
            "ensemble_scheduling",
            "only an ensemble may set it",
        ),
    ],
)
def test_each_rule_names_model_and_field(extra: str, field: str, words: str) -> None:
    problems = validate(base(extra))
    assert field in fields(problems), problems
    problem = next(p for p in problems if p.field == field)
    assert problem.message.startswith("model '")
    assert words in problem.message


@pytest.mark.parametrize(
    "extra",
    [
        "dynamic_batching { }",
        "max_batch_size: 0 dynamic_batching { }",  # Triton accepts it: nothing is batched
        "max_batch_size: 0 sequence_batching { }",
        'input [{ name: "v" data_type: TYPE_FP32 dims: [-1, -1] }]',
        'input [{ name: "s" data_type: TYPE_FP32 dims: [1] reshape { shape: [] } }]',
        'input [{ name: "r" data_type: TYPE_FP32 dims: [2, 4, -1, 6] '
        "reshape { shape: [8, -1, 1, 6] } }]",
        'output [{ name: "l" data_type: TYPE_STRING dims: [1] label_filename: "labels.txt" }]',
        "instance_group [{ count: 0 }, { kind: KIND_GPU gpus: [3] }, { kind: KIND_MODEL }]",
        'platform: "onnxruntime_onnx"',  # python ignores the platform, as in Triton
        "version_policy { all { } }",
        "version_policy { specific { versions: [1, 2] } }",
        "dynamic_batching { priority_levels: 3 default_priority_level: 3 "
        "priority_queue_policy { key: 1 value { } } }",
    ],
)
def test_valid_variants_have_no_problems(extra: str) -> None:
    assert validate(base(extra)) == []


def test_scalar_reshape_needs_batching() -> None:
    config = base(
        'max_batch_size: 0 input [{ name: "s" data_type: TYPE_FP32 dims: [1] '
        "reshape { shape: [] } }]"
    )
    assert fields(validate(config)) == ["input[1].reshape.shape"]


def test_every_problem_of_a_broken_config_is_reported() -> None:
    config = read_config(ASSETS / "invalid" / "bad_tensors.pbtxt")
    assert sorted(fields(validate(config))) == sorted(
        [
            "max_batch_size",
            "input[1].name",
            "input[0].dims",
            "input[1].data_type",
            "input[2].name",
            "input[2].dims",
            "output[1].name",
            "output[0].reshape.shape",
        ]
    )


def test_bad_batching_file() -> None:
    config = read_config(ASSETS / "invalid" / "bad_batching.pbtxt")
    assert sorted(fields(validate(config, model_name="bad_batching"))) == sorted(
        [
            "platform",
            "version_policy.specific.versions",
            "dynamic_batching.preferred_batch_size",
            "dynamic_batching.preferred_batch_size",
            "dynamic_batching.default_priority_level",
            "instance_group[0].count",
            "instance_group[0].gpus",
        ]
    )


def test_name_must_match_the_model_directory() -> None:
    config = parse_pbtxt(BASE)
    assert validate(config, model_name="m") == []
    [problem] = validate(config, model_name="other")
    assert problem.field == "name"
    assert problem.message == (
        "model 'other': 'name' is 'm' but the model directory is 'other'; they must match"
    )
    # an empty name is filled in from the directory, as Triton does
    assert validate(base('name: ""'), model_name="m") == []


def test_problem_str_and_check_message() -> None:
    problem = Problem("input[0].dims", "model 'm': bad")
    assert str(problem) == "input[0].dims: model 'm': bad"
    with pytest.raises(ConfigError) as info:
        check(base("max_batch_size: -1 instance_group [{ count: -1 }]"))
    message = str(info.value)
    assert message.startswith("model 'm' has an invalid configuration: max_batch_size: ")
    assert "instance_group[0].count: model 'm'" in message


def make_model(tmp_path: Path, files: dict[str, str]) -> Path:
    model = tmp_path / "m"
    for relative, text in files.items():
        (model / relative).parent.mkdir(parents=True, exist_ok=True)
        (model / relative).write_text(text)
    return model


def test_python_backend_needs_model_py_in_a_version_folder(tmp_path: Path) -> None:
    model = make_model(tmp_path, {"config.pbtxt": BASE, "1/other.py": "", "model.py": ""})
    [problem] = validate(parse_pbtxt(BASE), model_name="m", model_path=model)
    assert problem.field == "default_model_filename"
    assert str(model / "1" / "model.py") in problem.message
    (model / "2").mkdir()
    (model / "2" / "model.py").write_text("")
    assert validate(parse_pbtxt(BASE), model_name="m", model_path=model) == []


def test_python_backend_uses_default_model_filename(tmp_path: Path) -> None:
    model = make_model(tmp_path, {"1/model.py": ""})
    config = base('default_model_filename: "serve.py"')
    assert fields(validate(config, model_path=model)) == ["default_model_filename"]
    (model / "1" / "serve.py").write_text("")
    assert validate(config, model_path=model) == []


def test_python_backend_without_version_folders(tmp_path: Path) -> None:
    model = make_model(tmp_path, {"config.pbtxt": BASE})
    [problem] = validate(parse_pbtxt(BASE), model_path=model)
    assert "no numeric version folder" in problem.message


def test_backend_may_come_from_the_model_files(tmp_path: Path) -> None:
    model = make_model(tmp_path, {"1/model.py": ""})
    config = base('backend: ""')
    assert validate(config, model_path=model) == []
    assert fields(validate(config)) == ["backend"]


def test_other_backends_do_not_need_model_py(tmp_path: Path) -> None:
    model = make_model(tmp_path, {"1/model.onnx": ""})
    config = base('backend: "onnxruntime"')
    assert validate(config, model_path=model) == []


# --- ensembles -----------------------------------------------------------------------------
# Messages start with Triton 2.51's own text (ValidateEnsembleSchedulingConfig), then say what
# to change.


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    return f'{{ model_name: "{model}" {" ".join(maps)} }}'


def ensemble(*steps: str, extra: str = "") -> list[Problem]:
    text = ENSEMBLE + extra + f"ensemble_scheduling {{ step [{', '.join(steps)}] }}"
    return validate(parse_pbtxt(text), model_name="e")


def test_valid_ensemble() -> None:
    assert ensemble(step("a", {"x": "IN"}, {"y": "t"}), step("b", {"x": "t"}, {"y": "OUT"})) == []


def test_one_tensor_may_feed_several_steps() -> None:
    problems = ensemble(
        step("a", {"x": "IN"}, {"y": "t"}),
        step("b", {"x": "IN", "w": "t"}, {"y": "u"}),
        step("c", {"x": "t", "w": "u"}, {"y": "OUT"}),
    )
    assert problems == []


def test_ensemble_scheduling_on_a_plain_model() -> None:
    problems = validate(base('ensemble_scheduling { step [{ model_name: "a" }] }'))
    message = next(p.message for p in problems if p.field == "ensemble_scheduling")
    assert "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble" in (
        message
    )
    assert 'set platform: "ensemble"' in message


def test_ensemble_without_steps() -> None:
    for text in (ENSEMBLE, ENSEMBLE + "ensemble_scheduling { }"):
        problems = validate(parse_pbtxt(text))
        assert fields(problems) == ["ensemble_scheduling.step"]
        assert "must specify 'step' for ensemble 'e'" in problems[0].message
        assert "at least one step" in problems[0].message


def test_ensemble_forbids_backend_instances_optimization_and_warmup() -> None:
    problems = ensemble(
        step("a", {"x": "IN"}, {"y": "OUT"}),
        extra='backend: "python" instance_group [{ count: 1 }] optimization { } '
        'model_warmup [{ name: "w" }]',
    )
    assert sorted(fields(problems)) == ["backend", "instance_group", "model_warmup", "optimization"]
    messages = " | ".join(p.message for p in problems)
    assert "instance group should not be specified for ensemble 'e'; remove" in messages
    assert "optimization should not be specified for ensemble 'e'; remove" in messages
    assert "model_warmup can not be specified for ensemble 'e'; remove" in messages


def test_ensemble_step_fields() -> None:
    problems = ensemble(step("", {"x": "IN"}, {"y": "OUT"}), step("b", {}, {}))
    assert fields(problems) == [
        "ensemble_scheduling.step[0].model_name",
        "ensemble_scheduling.step[1].input_map",
        "ensemble_scheduling.step[1].output_map",
    ]
    assert "must specify 'model_name' in step 0 of ensemble 'e'" in problems[0].message
    assert "must specify 'input_map' in step 1 of ensemble 'e'" in problems[1].message
    assert "step 1 (model 'b') has an empty 'input_map'" in problems[1].message


def test_ensemble_reads_an_unknown_tensor() -> None:
    problems = ensemble(step("a", {"x": "IN", "w": "nowhere"}, {"y": "OUT"}))
    assert "ensemble_scheduling.step[0].input_map" in fields(problems)
    message = next(p.message for p in problems if p.field.endswith("input_map"))
    assert "ensemble tensor 'nowhere' is not connected" in message
    assert "step 0 (model 'a') feeds its input 'w' from 'nowhere'" in message
    assert "neither an ensemble input nor written by any step" in message
    # The output it feeds can never be computed, and Triton names the same culprit.
    output = next(p.message for p in problems if p.field == "output[0].name")
    assert (
        "output 'OUT' for ensemble 'e' is not written: at least one of its depending "
        "tensors, 'nowhere', is not connected" in output
    )


def test_ensemble_tensor_written_twice() -> None:
    problems = ensemble(step("a", {"x": "IN"}, {"y": "OUT"}), step("b", {"x": "IN"}, {"y": "OUT"}))
    assert fields(problems) == ["ensemble_scheduling.step[1].output_map"]
    message = problems[0].message
    assert (
        "ensemble tensor 'OUT' can appear in an output map only once for ensemble 'e' step 1"
        in message
    )
    assert "which step 0 already writes" in message


def test_ensemble_output_never_written_and_input_never_read() -> None:
    problems = ensemble(
        step("a", {"x": "IN"}, {"y": "OUT"}),
        extra='input [{ name: "SPARE" data_type: TYPE_FP32 dims: [1] }] '
        'output [{ name: "OUT2" data_type: TYPE_FP32 dims: [1] }]',
    )
    assert sorted(fields(problems)) == ["input[1].name", "output[1].name"]
    messages = {p.field: p.message for p in problems}
    # Triton's texts, unbalanced quote included.
    assert (
        "ensemble output 'OUT2' for ensemble e' is not used: no step writes 'OUT2'"
        in messages["output[1].name"]
    )
    assert (
        "ensemble input 'SPARE' for ensemble e' is not used: no step reads 'SPARE'"
        in messages["input[1].name"]
    )


def test_ensemble_output_read_but_never_written() -> None:
    problems = ensemble(
        step("a", {"x": "IN", "w": "OUT2"}, {"y": "OUT"}),
        extra='output [{ name: "OUT2" data_type: TYPE_FP32 dims: [1] }]',
    )
    message = next(p.message for p in problems if p.field == "output[1].name")
    assert "output 'OUT2' for ensemble 'e' is not written: no step writes 'OUT2'" in message


def test_ensemble_step_output_unused() -> None:
    problems = ensemble(step("a", {"x": "IN"}, {"y": "OUT", "z": "dangling"}))
    assert fields(problems) == ["ensemble_scheduling.step[0].output_map"]
    assert "ensemble tensor 'dangling' is unused in ensemble 'e'" in problems[0].message
    assert "remove it from that step's 'output_map'" in problems[0].message


def test_ensemble_cycle() -> None:
    problems = ensemble(
        step("a", {"x": "IN", "w": "t2"}, {"y": "t1"}),
        step("b", {"x": "t1"}, {"y": "t2", "o": "OUT"}),
    )
    assert fields(problems) == ["ensemble_scheduling.step", "output[0].name"]
    assert (
        "steps form a cycle: step 0 (model 'a') -> 't1' -> step 1 (model 'b') -> 't2' -> "
        "step 0 (model 'a')" in problems[0].message
    )
    assert (
        "output 'OUT' for ensemble 'e' is not written: at least one of its depending tensors, "
        "'t2', is not connected" in problems[1].message
    )
    assert "step 1 (model 'b') writes 'OUT' but can never run" in problems[1].message


def test_broken_ensemble_file_reports_everything() -> None:
    problems = validate(read_config(ASSETS / "invalid" / "ensemble_broken.pbtxt"))
    assert sorted(fields(problems)) == sorted(
        [
            "ensemble_scheduling.step[0].input_map",  # reads 'missing'
            "output[1].name",  # OUT2 never written
            "ensemble_scheduling.step",  # steps 1 and 2 form a cycle
            "output[0].name",  # OUT can never be computed
        ]
    )
    cycle = next(p for p in problems if p.field == "ensemble_scheduling.step")
    assert (
        "step 1 (model 'b') -> 't1' -> step 2 (model 'c') -> 't2' -> step 1 (model 'b')"
        in cycle.message
    )
