"""A config against its model file, in the words of Triton's onnxruntime and libtorch backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.config import parse_pbtxt
from workbench.config.graph_checks import model_file_problems, onnx_problems, torchscript_problems
from workbench.config.model_files import GraphSignature, GraphTensor

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"

LINEAR = GraphSignature(
    inputs=(GraphTensor("INPUT", "FP32", (-1, 4)),),
    outputs=(GraphTensor("OUTPUT", "FP32", (-1, 3)),),
)


def linear_config(extra: str = "", *, max_batch_size: int = 8, dims: str = "4") -> str:
    return f"""
        name: "linear" platform: "onnxruntime_onnx" max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
        output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] }} ]
        {extra}
    """


def messages(text: str, signature: GraphSignature = LINEAR) -> list[str]:
    return [str(p) for p in onnx_problems(parse_pbtxt(text), signature, model_name="linear")]


def test_a_config_that_fits_the_graph_has_no_problem() -> None:
    assert messages(linear_config()) == []


def test_dims_that_the_graph_does_not_take_get_tritons_message() -> None:
    assert messages(linear_config(dims="5")) == [
        "input[0].dims: model 'linear', tensor 'INPUT': the model expects 2 dimensions (shape "
        "[-1,4]) but the model configuration specifies 2 dimensions (an initial batch "
        "dimension because max_batch_size > 0 followed by the explicit tensor shape, making "
        "complete shape [-1,5]); set dims: [4] (the graph's shape without its batch dimension)"
    ]


def test_without_batching_the_whole_shape_is_compared() -> None:
    fixed = GraphSignature(
        inputs=(GraphTensor("INPUT", "FP32", (2, 4)),),
        outputs=(GraphTensor("OUTPUT", "FP32", (2, 3)),),
    )
    text = linear_config(max_batch_size=0, dims="4")
    assert messages(text, fixed)[0] == (
        "input[0].dims: model 'linear', tensor 'INPUT': the model expects 2 dimensions (shape "
        "[2,4]) but the model configuration specifies 1 dimensions (shape [4]); set dims: [2,4]"
    )
    (batching, *_) = messages(linear_config(), fixed)
    assert "the first dimension must be -1; but shape expected by the model is [2,4]" in batching
    assert "set max_batch_size: 0 and dims: [2,4]" in batching


def test_a_configured_wildcard_fits_only_a_variable_graph_dimension() -> None:
    # CompareDimsSupported: an input's graph -1 takes any size, not the other way round;
    # outputs compare exactly.
    assert len(messages(linear_config(dims="-1"))) == 1
    variable = GraphSignature(
        inputs=(GraphTensor("INPUT", "FP32", (-1, -1)),),
        outputs=(GraphTensor("OUTPUT", "FP32", (-1, -1)),),
    )
    found = messages(linear_config(), variable)
    assert [m.split(":")[0] for m in found] == ["output[0].dims"]


def test_count_names_and_data_types_get_tritons_messages() -> None:
    text = linear_config().replace("TYPE_FP32 dims: [ 3 ]", "TYPE_INT64 dims: [ 3 ]")
    text = text.replace("input [ {", 'input [ { name: "MASK" data_type: TYPE_BOOL dims: [ 1 ] }, {')
    assert messages(text) == [
        "input: unable to load model 'linear', configuration expects 2 inputs, model provides "
        "1; the graph's inputs are 'INPUT' FP32 [-1,4]: configure exactly these",
        "input[0].name: unexpected inference input 'MASK', allowed inputs are: INPUT; model "
        "'linear': rename it to one of the graph's inputs",
        "output[0].data_type: unable to load model 'linear', configuration expects datatype "
        "TYPE_INT64 for output 'OUTPUT', model provides TYPE_FP32; set data_type: TYPE_FP32",
    ]


def test_strings_scalars_and_optional_inputs() -> None:
    graph = GraphSignature(
        inputs=(GraphTensor("TEXT", "BYTES", ()),),
        outputs=(GraphTensor("OUT", "FP32", (-1,)),),
    )
    text = """
        name: "m" backend: "onnxruntime" max_batch_size: 4
        input [ { name: "TEXT" data_type: TYPE_FP32 dims: [ 2 ] optional: true } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
    """
    found = [str(p) for p in onnx_problems(parse_pbtxt(text), graph, model_name="m")]
    assert found == [
        "input: unable to load model 'm', configuration expects 0 inputs, model provides 1; "
        "the graph's inputs are 'TEXT' BYTES []: configure exactly these",
        "input[0].optional: unable to load model 'm', optional input 'TEXT' is not supported "
        "for models that support batching; remove 'optional' or set max_batch_size: 0",
        "input[0].data_type: unable to load model 'm', configuration expects datatype "
        "TYPE_FP32 for input 'TEXT', model provides TYPE_BYTES; set data_type: TYPE_STRING",
        "input[0].dims: unable to load model 'm', scalar tensor 'TEXT', should only provide 1 "
        "in the model configuration when the model doesn't support batching. Model "
        "configuration provided: [2]. Set dims: [1]",
        "output[0].dims: model 'm', tensor 'OUT': the model expects 1 dimensions (shape [-1]) "
        "but the model configuration specifies 2 dimensions (an initial batch dimension "
        "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
        "shape [-1,1]); set dims: [] (the graph's shape without its batch dimension)",
    ]


def test_reshape_is_compared_instead_of_dims() -> None:
    text = linear_config().replace("dims: [ 4 ] }", "dims: [ 2, 2 ] reshape: { shape: [ 4 ] } }")
    assert messages(text) == []


def test_the_example_onnx_file_is_read_and_checked() -> None:
    pytest.importorskip("onnx")
    config = parse_pbtxt((EXAMPLES / "linear_onnx" / "config.pbtxt").read_text())
    version = [EXAMPLES / "linear_onnx" / "1"]
    assert model_file_problems(config, version, model_name="linear_onnx") == []
    config.input[0].dims[0] = 5
    (problem,) = model_file_problems(config, version, model_name="linear_onnx")
    assert problem.field == "input[0].dims"
    assert "the model expects 2 dimensions (shape [-1,4])" in problem.message


def test_a_missing_or_unreadable_file_is_left_to_the_load(tmp_path: Path) -> None:
    config = parse_pbtxt(linear_config(dims="5"))
    assert model_file_problems(config, [tmp_path], model_name="linear") == []
    (tmp_path / "model.onnx").write_bytes(b"not a graph")
    assert model_file_problems(config, [tmp_path], model_name="linear") == []


def test_torchscript_input_count_gets_libtorchs_message() -> None:
    path = Path("model.pt")
    config = parse_pbtxt(
        'platform: "pytorch_libtorch" input [ { name: "a__0" data_type: TYPE_FP32 dims: [1] },'
        ' { name: "b__1" data_type: TYPE_FP32 dims: [1] } ]'
    )
    assert (
        torchscript_problems(config, ["TensorType", "TensorType"], model_name="t", path=path) == []
    )
    (problem,) = torchscript_problems(config, ["TensorType"], model_name="t", path=path)
    assert problem.message == (
        "unable to load model 't', configuration expects 2 inputs, model provides 1; forward() "
        "of model.pt takes 1 tensor argument(s): configure that many inputs"
    )
    assert torchscript_problems(config, ["DictType"], model_name="t", path=path) == []


def test_the_example_torchscript_file_is_read_and_checked() -> None:
    pytest.importorskip("torch")
    folder = EXAMPLES / "linear_torchscript"
    config = parse_pbtxt((folder / "config.pbtxt").read_text())
    assert model_file_problems(config, [folder / "1"], model_name="linear_torchscript") == []
    config.input.add(name="INPUT__1", data_type=config.input[0].data_type, dims=[4])
    (problem,) = model_file_problems(config, [folder / "1"], model_name="linear_torchscript")
    assert "configuration expects 2 inputs, model provides 1" in problem.message
