"""Ensembles and BLS through the core, with python-backend models on disk; ensemble helpers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.core.conftest import write_add_model
from tests.core.test_inference_core import ones, request, run
from workbench.config import parse_pbtxt
from workbench.core import CoreOptions, InferenceCore
from workbench.core.ensemble import fit_batch, triton_output_order, triton_pruned_steps
from workbench.core.ensemble_validation import ComposingModel, load_problems
from workbench.errors import InternalError, InvalidArgumentError, NotFoundError

CHAIN = """
name: "chain"
platform: "ensemble"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling {
  step [
    { model_name: "plus_one" model_version: -1
      input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "mid" } },
    { model_name: "plus_two" model_version: -1
      input_map { key: "INPUT0" value: "mid" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }
  ]
}
"""

BLS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0")
            inner = pb_utils.InferenceRequest(
                model_name="plus_one", inputs=[x], requested_output_names=["OUTPUT0"])
            result = inner.exec()
            if result.has_error():
                raise pb_utils.TritonModelException(result.error().message())
            y = pb_utils.get_output_tensor_by_name(result, "OUTPUT0").as_numpy()
            out = pb_utils.Tensor("OUTPUT0", (y * 10).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def write_chain(repo: Path, text: str = CHAIN) -> None:
    write_add_model(repo, "plus_one", delta=1.0)
    write_add_model(repo, "plus_two", delta=2.0)
    (repo / "chain" / "1").mkdir(parents=True)
    (repo / "chain" / "config.pbtxt").write_text(text)


# --- through the core ------------------------------------------------------------------------


def test_ensemble_runs_steps_in_order(repo: Path) -> None:
    write_chain(repo)

    async def scenario(core: InferenceCore) -> None:
        response = await core.infer(request("chain", ones(3)))
        np.testing.assert_array_equal(response.outputs[0].array, np.full((3, 4), 4, np.float32))
        assert response.parameters == {
            "sequence_id": 0,
            "sequence_start": False,
            "sequence_end": False,
        }
        stats = {s["name"]: s for s in core.statistics()["model_stats"]}
        assert stats["chain"]["inference_count"] == 3
        assert stats["chain"]["execution_count"] == 1
        assert stats["chain"]["batch_stats"][0]["batch_size"] == 3
        assert stats["plus_one"]["inference_count"] == 3
        assert stats["plus_two"]["inference_count"] == 3

    run(InferenceCore(repo), scenario)


def test_ensemble_failure_names_step_and_model(repo: Path) -> None:
    write_chain(repo)
    (repo / "plus_two" / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        raise RuntimeError('boom')\n"
    )

    async def scenario(core: InferenceCore) -> None:
        with pytest.raises(InternalError) as caught:
            await core.infer(request("chain", ones()))
        message = str(caught.value)
        assert message.startswith("in ensemble 'chain', ")
        assert "boom" in message
        assert message.endswith("(step 1, model 'plus_two')")
        fail = core.statistics("chain")["model_stats"][0]["inference_stats"]["fail"]
        assert fail["count"] == 2  # Triton 2.51 counts a failed ensemble request twice

    run(InferenceCore(repo), scenario)


def test_explicit_load_of_ensemble_loads_its_steps(repo: Path) -> None:
    write_chain(repo)
    options = CoreOptions(control_mode="explicit")

    async def scenario(core: InferenceCore) -> None:
        assert not core.model_ready("plus_one")
        await core.load("chain")
        assert core.model_ready("plus_one") and core.model_ready("plus_two")
        assert (await core.infer(request("chain", ones()))).outputs[0].array[0, 0] == 4
        await core.unload("chain", unload_dependents=True)
        assert not core.model_ready("plus_one")

    run(InferenceCore(repo, options), scenario)


def test_ensemble_with_missing_step_is_unavailable(repo: Path) -> None:
    write_chain(repo)
    for path in (repo / "plus_two").rglob("*"):
        if path.is_file():
            path.unlink()
    (repo / "plus_two" / "1").rmdir()
    (repo / "plus_two").rmdir()

    async def scenario(core: InferenceCore) -> None:
        entry = next(e for e in core.repository_index() if e["name"] == "chain")
        assert entry["state"] == "UNAVAILABLE"
        assert entry["reason"].startswith(
            "ensemble chain contains models that are not available or ambiguous: plus_two;"
        )
        with pytest.raises(NotFoundError, match="has no available versions"):
            await core.infer(request("chain", ones()))

    run(InferenceCore(repo), scenario)


def test_ensemble_with_a_dtype_mismatch_is_unavailable(repo: Path) -> None:
    write_chain(repo, CHAIN.replace("TYPE_FP32", "TYPE_INT32", 1))

    async def scenario(core: InferenceCore) -> None:
        entry = next(e for e in core.repository_index() if e["name"] == "chain")
        assert entry["state"] == "UNAVAILABLE"
        assert entry["reason"].startswith(
            "in ensemble chain, ensemble tensor INPUT0: inconsistent data type: TYPE_INT32 is "
            "inferred from model chain while TYPE_FP32 is inferred from model plus_one;"
        )
        assert core.model_ready("plus_one")

    run(InferenceCore(repo), scenario)


def test_batching_ensemble_feeds_a_non_batching_model(repo: Path) -> None:
    write_chain(repo)
    config = repo / "plus_two" / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 0"))

    async def scenario(core: InferenceCore) -> None:
        # Batch 1: the leading 1 goes for plus_two ([4]) and comes back for the ensemble.
        response = await core.infer(request("chain", ones(1)))
        assert response.outputs[0].array.shape == (1, 4)
        with pytest.raises(InvalidArgumentError) as caught:  # batch 2 does not fit [4]
            await core.infer(request("chain", ones(2)))
        assert str(caught.value).startswith(
            "in ensemble 'chain', [request id: <id_unknown>] unexpected shape for input "
            "'INPUT0' for model 'plus_two'. Expected [4], got [2,4]."
        )

    run(InferenceCore(repo), scenario)


def test_bls_calls_back_into_the_server(repo: Path) -> None:
    write_add_model(repo, "plus_one", delta=1.0)
    write_add_model(repo, "bls", delta=0.0)
    (repo / "bls" / "1" / "model.py").write_text(BLS_MODEL)

    async def scenario(core: InferenceCore) -> None:
        results = await asyncio.gather(*(core.infer(request("bls", ones())) for _ in range(3)))
        for response in results:
            assert response.outputs[0].array[0, 0] == 20.0

    run(InferenceCore(repo), scenario)


# --- helpers that reproduce Triton ----------------------------------------------------------


@pytest.mark.parametrize(
    ("dims", "batching", "batch", "shape", "expected"),
    [
        ([4], True, 2, [2, 4], [2, 4]),  # both batch: unchanged
        ([4], False, 0, [4], [4]),  # neither batches: unchanged
        ([4], True, 0, [4], [1, 4]),  # into a batching model: gains a leading 1
        ([4], False, 1, [1, 4], [4]),  # batch 1 into a non-batching model: loses it
        ([4], False, 2, [2, 4], [2, 4]),  # batch 2 cannot: the model rejects it
        ([-1, 4], False, 1, [1, 4], [1, 4]),  # already fits the non-batching dims
    ],
)
def test_fit_batch(
    dims: list[int], batching: bool, batch: int, shape: list[int], expected: list[int]
) -> None:
    assert fit_batch(dims, batching, batch, shape) == expected


@pytest.mark.parametrize(
    ("config_order", "triton_order"),
    [  # observed on Triton 2.51 (output order of the response)
        (["FAST_OUT", "SLOW_OUT"], ["SLOW_OUT", "FAST_OUT"]),
        (["SLOW_OUT", "FAST_OUT"], ["FAST_OUT", "SLOW_OUT"]),
        (["A", "B", "C"], ["B", "C", "A"]),
        (["P", "Q", "R", "S", "T"], ["T", "S", "R", "Q", "P"]),
        (["OUT", "PLUS_ONE"], ["PLUS_ONE", "OUT"]),
    ],
)
def test_output_order_is_tritons(config_order: list[str], triton_order: list[str]) -> None:
    assert triton_output_order(config_order) == triton_order


DIAMOND = """
name: "dia"
platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }]
output [
  { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "PLUS_ONE" data_type: TYPE_FP32 dims: [ 4 ] }
]
ensemble_scheduling { step [
  { model_name: "a" model_version: -1
    input_map { key: "x" value: "IN" } output_map { key: "y" value: "PLUS_ONE" } },
  { model_name: "b" model_version: -1
    input_map { key: "x" value: "IN" } output_map { key: "y" value: "DOUBLED" } },
  { model_name: "c" model_version: -1
    input_map { key: "x" value: "PLUS_ONE" } input_map { key: "w" value: "DOUBLED" }
    output_map { key: "y" value: "OUT" } }
] }
"""

TWO_INPUTS = """
name: "two_in"
platform: "ensemble"
max_batch_size: 8
input [{ name: "IN1" data_type: TYPE_FP32 dims: [ 4 ] },
       { name: "IN2" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling { step [
  { model_name: "f" model_version: -1
    input_map { key: "x" value: "IN1" } output_map { key: "y" value: "A" } },
  { model_name: "f" model_version: -1
    input_map { key: "x" value: "IN2" } output_map { key: "y" value: "B" } }
] }
"""


@pytest.mark.parametrize(
    ("text", "requested", "pruned"),
    [  # each observed on Triton 2.51: a pruned step an output needs ends in "unexpected deadlock"
        (DIAMOND, ["OUT", "PLUS_ONE"], set()),
        (DIAMOND, ["OUT"], {0}),  # 'a' is skipped although 'c' reads PLUS_ONE
        (DIAMOND, ["PLUS_ONE"], {0, 1, 2}),
        (TWO_INPUTS, ["B"], {0}),
        (TWO_INPUTS, ["A"], {0, 1}),  # unread IN2 counts against step 0
    ],
)
def test_pruning_is_tritons(text: str, requested: list[str], pruned: set[int]) -> None:
    assert triton_pruned_steps(parse_pbtxt(text), requested) == pruned


# --- load-time checks against the composing models ------------------------------------------


def plain(name: str, dtype: str = "TYPE_FP32", dims: str = "4", max_batch_size: int = 8) -> str:
    return f"""
name: "{name}" backend: "python" max_batch_size: {max_batch_size}
input [{{ name: "x" data_type: {dtype} dims: [ {dims} ] }},
       {{ name: "w" data_type: {dtype} dims: [ {dims} ] optional: true }}]
output [{{ name: "y" data_type: {dtype} dims: [ {dims} ] }}]
"""


def problems_with(models: dict[str, str], text: str = DIAMOND) -> list[str]:
    composing = {
        name: ComposingModel(known=True, config=parse_pbtxt(config), versions=[1])
        for name, config in models.items()
    }
    return load_problems(parse_pbtxt(text), composing)


def test_matching_composing_models_have_no_problems() -> None:
    assert problems_with({"a": plain("a"), "b": plain("b"), "c": plain("c")}) == []


def test_dtype_mismatch_between_steps() -> None:
    problems = problems_with({"a": plain("a"), "b": plain("b"), "c": plain("c", "TYPE_INT32")})
    assert problems == [
        "in ensemble dia, ensemble tensor DOUBLED: inconsistent data type: TYPE_FP32 is "
        "inferred from model b while TYPE_INT32 is inferred from model c; step 1 (model 'b') "
        "output 'y' is TYPE_FP32 but step 2 (model 'c') input 'w' is TYPE_INT32: make the two "
        "data types agree",
        # PLUS_ONE is an ensemble output too: Triton compares with the ensemble's declaration.
        "in ensemble dia, ensemble tensor PLUS_ONE: inconsistent data type: TYPE_FP32 is "
        "inferred from model dia while TYPE_INT32 is inferred from model c; ensemble output "
        "'PLUS_ONE' is TYPE_FP32 but step 2 (model 'c') input 'x' is TYPE_INT32: make the two "
        "data types agree",
        "in ensemble dia, ensemble tensor OUT: inconsistent data type: TYPE_FP32 is inferred "
        "from model dia while TYPE_INT32 is inferred from model c; ensemble output 'OUT' is "
        "TYPE_FP32 but step 2 (model 'c') output 'y' is TYPE_INT32: make the two data types "
        "agree",
    ]


def test_shape_mismatch_names_both_shapes() -> None:
    problems = problems_with({"a": plain("a", dims="8"), "b": plain("b"), "c": plain("c")})
    assert problems[0].startswith(
        "in ensemble dia, ensemble tensor IN: inconsistent shape: [-1,4] is inferred from "
        "model dia while [-1,8] is inferred from model a; ensemble input 'IN' has dims [4] "
        "but step 0 (model 'a') input 'x' has dims [8]"
    )


def test_non_batching_model_may_take_the_full_shape() -> None:
    # Triton compares full shapes too: [-1,4] from a batching ensemble matches dims [-1,4].
    models = {"a": plain("a", dims="-1, 4", max_batch_size=0), "b": plain("b"), "c": plain("c")}
    problems = problems_with(models)
    assert not any("tensor IN:" in p for p in problems)


def test_step_maps_names_the_model_does_not_have() -> None:
    text = DIAMOND.replace('key: "w" value: "DOUBLED"', 'key: "W" value: "DOUBLED"')
    text = text.replace('{ key: "y" value: "PLUS_ONE" }', '{ key: "Y" value: "PLUS_ONE" }')
    problems = problems_with({"a": plain("a"), "b": plain("b"), "c": plain("c")}, text)
    assert (
        "in ensemble dia, ensemble tensor DOUBLED is mapping to non-existing input W in model "
        "c; step 2 (model 'c'): the inputs of 'c' are 'x', 'w'; fix the key in 'input_map'"
    ) in problems
    assert (
        "in ensemble dia, ensemble tensor PLUS_ONE is mapped from non-existing output Y in "
        "model a; step 0 (model 'a'): the outputs of 'a' are 'y'; fix the key in 'output_map'"
    ) in problems


def test_required_input_left_unmapped() -> None:
    required = plain("b").replace("optional: true", "")
    problems = problems_with({"a": plain("a"), "b": required, "c": plain("c")})
    assert problems == [
        "in ensemble dia, input w in model b is not mapped to any ensemble tensors; step 1 "
        '(model \'b\'): add input_map { key: "w" value: "<ensemble tensor>" }'
    ]


def test_composing_model_allows_a_smaller_batch() -> None:
    problems = problems_with({"a": plain("a", max_batch_size=2), "b": plain("b"), "c": plain("c")})
    assert problems == [
        "ensemble dia allows maximum batch size 8, but it contains model a which only allows "
        "maximum batch size to be 2; step 0 (model 'a'): lower the ensemble's 'max_batch_size' "
        "to 2 or raise that of 'a'"
    ]


def test_dependencies_come_first() -> None:
    text = DIAMOND.replace('"b" model_version: -1', '"b" model_version: 3')
    composing = {
        "a": ComposingModel(known=True, failure="failed to load 'a': ImportError: no numpy"),
        "b": ComposingModel(known=True, config=parse_pbtxt(plain("b")), versions=[1, 2]),
        "c": ComposingModel(known=True, failure="unloaded"),
    }
    assert load_problems(parse_pbtxt(text), composing) == [
        "ensemble 'dia' depends on 'a' which has no loaded version. Model 'a' loading failed "
        "with error: failed to load 'a': ImportError: no numpy",
        "ensemble 'dia' depends on 'b' whose required version 3 is not loaded. step 1 (model "
        "'b') asks for version 3 but 'b' has version(s) 1, 2 loaded; set its 'model_version' "
        "to one of them or to -1 (the latest), or change 'version_policy' of 'b'",
        "ensemble 'dia' depends on 'c' which has no loaded version. Load 'c' first.",
    ]
    composing["a"] = ComposingModel(known=False)
    assert load_problems(parse_pbtxt(text), composing) == [
        "ensemble dia contains models that are not available or ambiguous: a; step 0 (model "
        "'a'): no such model in the model repository (or it is in several repositories); fix "
        "'model_name' or add the model"
    ]
