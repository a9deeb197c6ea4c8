"""Ensembles and BLS through the core, with python-backend models on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.core.conftest import write_add_model
from tests.core.test_inference_core import ones, request, run
from workbench.core import CoreOptions, InferenceCore
from workbench.errors import InternalError, NotFoundError

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


def write_chain(repo: Path) -> None:
    write_add_model(repo, "plus_one", delta=1.0)
    write_add_model(repo, "plus_two", delta=2.0)
    (repo / "chain" / "1").mkdir(parents=True)
    (repo / "chain" / "config.pbtxt").write_text(CHAIN)


def test_ensemble_runs_steps_in_order(repo: Path) -> None:
    write_chain(repo)

    async def scenario(core: InferenceCore) -> None:
        response = await core.infer(request("chain", ones(3)))
        np.testing.assert_array_equal(response.outputs[0].array, np.full((3, 4), 4, np.float32))
        stats = {s["name"]: s for s in core.statistics()["model_stats"]}
        assert stats["chain"]["inference_count"] == 3
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
        with pytest.raises(InternalError, match=r"step 1 \(model 'plus_two'\).*boom"):
            await core.infer(request("chain", ones()))

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
        assert entry["state"] == "UNAVAILABLE" and "plus_two" in entry["reason"]
        with pytest.raises(NotFoundError, match="has no available versions"):
            await core.infer(request("chain", ones()))

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
