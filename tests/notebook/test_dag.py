"""The ensemble graph (no plotly), its drawing, and ``Workbench.dag`` on a live server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.notebook.conftest import EXAMPLES
from workbench.config import parse_pbtxt, validate
from workbench.errors import InvalidArgumentError
from workbench.notebook import Workbench
from workbench.notebook.dag import MISSING, STEP, StepModel, build_graph
from workbench.notebook.dag_figure import RED, draw_graph

ENSEMBLE = """
name: "e" platform: "ensemble" max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "SIDE" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "a" model_version: -1
    input_map { key: "X" value: "RAW" } output_map { key: "Y" value: "mid" } },
  { model_name: "b" model_version: 2
    input_map { key: "X" value: "mid" } output_map { key: "Y" value: "OUT" } },
  { model_name: "c" model_version: -1
    input_map { key: "X" value: "RAW" } output_map { key: "Y" value: "SIDE" } }
] }
"""


def model(name: str, dims_in: int = 4, dims_out: int = 4, dtype: str = "FP32") -> StepModel:
    config = parse_pbtxt(
        f'name: "{name}" backend: "onnxruntime" max_batch_size: 8 '
        f'input {{ name: "X" data_type: TYPE_{dtype} dims: [{dims_in}] }} '
        f'output {{ name: "Y" data_type: TYPE_FP32 dims: [{dims_out}] }}'
    )
    return StepModel(
        config, "READY", stats={"success": 5, "queue_us": 12.0, "compute_infer_us": 80}
    )


STEPS = {"a": model("a"), "b": model("b", 4, 3), "c": model("c")}


def test_nodes_sit_in_topological_layers_with_labelled_edges() -> None:
    graph = build_graph(parse_pbtxt(ENSEMBLE), STEPS, state="READY")
    layers = [[node.id for node in layer] for layer in graph.layers()]
    assert layers == [
        ["input:RAW"],
        ["step:0", "step:2"],
        ["step:1"],
        ["output:OUT", "output:SIDE"],
    ]
    labels = {(e.source, e.target): e.label for e in graph.edges}
    assert labels == {
        ("input:RAW", "step:0"): "RAW FP32 [-1,4]",
        ("step:0", "step:1"): "mid FP32 [-1,4]",
        ("input:RAW", "step:2"): "RAW FP32 [-1,4]",
        ("step:1", "output:OUT"): "OUT FP32 [-1,3]",
        ("step:2", "output:SIDE"): "SIDE FP32 [-1,4]",
    }
    step = graph.nodes["step:1"]
    assert step.label == "b" and "onnxruntime" in step.details and "version 2" in step.details
    assert "queue 12 us, compute 80 us per request" in step.details
    assert graph.ok and graph.all_problems() == []


def test_validator_problems_land_on_their_nodes() -> None:
    broken = parse_pbtxt(ENSEMBLE.replace('value: "mid" } output_map', 'value: "mdi" } output_map'))
    graph = build_graph(broken, STEPS, validate(broken, model_name="e"), state="UNAVAILABLE")
    missing = graph.nodes[f"{MISSING}:mdi"]
    assert missing.kind == MISSING and missing.layer == 0 and missing.problems
    assert any("'mdi' is not connected" in p for p in graph.nodes["step:1"].problems)
    assert any("'mid' is unused" in p for p in graph.nodes["step:0"].problems)
    assert any(
        "output 'OUT' for ensemble 'e' is not written" in p
        for p in graph.nodes["output:OUT"].problems
    )
    assert graph.nodes["output:SIDE"].problems == []
    assert not graph.ok


def test_a_type_mismatch_marks_the_edge_at_fault() -> None:
    steps = dict(STEPS, c=model("c", dtype="INT32"))
    message = (
        "in ensemble e, ensemble tensor RAW: inconsistent data type: TYPE_FP32 is inferred from "
        "model e while TYPE_INT32 is inferred from model c; ensemble input 'RAW' is TYPE_FP32 "
        "but step 2 (model 'c') input 'X' is TYPE_INT32: make the two data types agree"
    )
    graph = build_graph(parse_pbtxt(ENSEMBLE), steps, [message])
    faulty = [(e.source, e.target) for e in graph.edges if e.problems]
    assert faulty == [("input:RAW", "step:2")]


def test_cycles_and_models_that_are_not_loaded() -> None:
    cyclic = parse_pbtxt(
        ENSEMBLE.replace(
            'value: "RAW" } output_map { key: "Y" value: "mid"',
            'value: "OUT" } output_map { key: "Y" value: "mid"',
        )
    )
    steps = dict(STEPS, c=StepModel(STEPS["c"].config, "UNAVAILABLE", "load failed: oops"))
    graph = build_graph(cyclic, steps, validate(cyclic, model_name="e"))
    assert graph.nodes["step:0"].layer == graph.nodes["step:1"].layer  # after the rest
    assert any("steps form a cycle" in p for p in graph.nodes["step:0"].problems)
    assert any("steps form a cycle" in p for p in graph.nodes["step:1"].problems)
    assert "'c' is UNAVAILABLE: load failed: oops" in graph.nodes["step:2"].problems


def test_ensemble_wide_problems_stay_on_the_graph() -> None:
    config = parse_pbtxt(ENSEMBLE + "instance_group { count: 1 }")
    graph = build_graph(config, STEPS, validate(config, model_name="e"))
    assert any("instance group should not be specified" in p for p in graph.problems)


def test_drawing_shows_problems_in_red_with_hover() -> None:
    broken = parse_pbtxt(ENSEMBLE.replace('value: "mid" } output_map', 'value: "mdi" } output_map'))
    figure = draw_graph(build_graph(broken, STEPS, validate(broken, model_name="e"), "UNAVAILABLE"))
    edges, nodes = figure.data
    colors = dict(zip(nodes.customdata, nodes.marker.color, strict=True))
    hovers = dict(zip(nodes.customdata, nodes.hovertext, strict=True))
    assert colors["step:1"] == RED and colors["step:2"] != RED
    assert "is not connected" in hovers["step:1"]
    labels = dict(zip(edges.customdata, edges.text, strict=True))
    assert labels["missing:mdi->step:1"] == "mdi FP32 [-1,4]"
    assert len(figure.layout.annotations) == len(edges.x)  # one arrow per edge
    assert "UNAVAILABLE" in figure.layout.title.text and "problem(s)" in figure.layout.title.text


@pytest.fixture(scope="module")
def ensemble_bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workbench]:
    root = tmp_path_factory.mktemp("dag") / "repo"
    for name in ("preprocess", "postprocess", "linear_onnx", "text_classifier"):
        shutil.copytree(EXAMPLES / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    broken = root / "broken"
    shutil.copytree(root / "text_classifier", broken)
    text = (broken / "config.pbtxt").read_text().replace('"text_classifier"', '"broken"')
    # wire the text straight into the ONNX model: a data type mismatch
    text = text.replace('key: "INPUT" value: "features"', 'key: "INPUT" value: "TEXT"')
    text = text.replace('key: "FEATURES" value: "features"', 'key: "FEATURES" value: "TEXT2"')
    (broken / "config.pbtxt").write_text(text)
    bench = Workbench(root)
    try:
        yield bench
    finally:
        bench.stop()


@pytest.mark.integration
def test_dag_of_a_served_ensemble_after_traffic(ensemble_bench: Workbench) -> None:
    from workbench.notebook.dag_source import ensemble_graph

    ensemble_bench.infer("text_classifier", {"TEXT": [["good"]]})
    graph = ensemble_graph(ensemble_bench, "text_classifier")
    assert graph.ok and graph.state == "READY"
    steps = [n for n in graph.nodes.values() if n.kind == STEP]
    assert [s.label for s in steps] == ["preprocess", "linear_onnx", "postprocess"]
    assert all(any(d.startswith("queue ") for d in s.details) for s in steps)
    figure = ensemble_bench.dag("text_classifier")
    assert "no problems found" in figure.layout.title.text


@pytest.mark.integration
def test_dag_of_an_ensemble_that_does_not_load(ensemble_bench: Workbench) -> None:
    from workbench.notebook.dag_source import ensemble_graph

    assert (ensemble_bench.models().set_index("name").loc["broken", "state"]) == "UNAVAILABLE"
    graph = ensemble_graph(ensemble_bench, "broken")
    assert graph.state == "UNAVAILABLE" and graph.reason
    problems = graph.all_problems()
    assert any("'TEXT2' is unused" in p for p in problems)
    assert any("inconsistent data type" in p for p in problems)
    faulty = [(e.source, e.target) for e in graph.edges if e.problems]
    assert faulty == [("input:TEXT", "step:1")]
    assert ensemble_bench.dag("broken").layout.title.text.startswith("ensemble 'broken'")


@pytest.mark.integration
def test_dag_refuses_a_model_that_is_not_an_ensemble(ensemble_bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError, match="'linear_onnx' is not an ensemble"):
        ensemble_bench.dag("linear_onnx")


def test_the_graph_model_imports_no_plotly() -> None:
    code = "import sys, workbench.notebook.dag; assert 'plotly' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
