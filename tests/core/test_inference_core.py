"""The core through its public facade, with real python-backend models on disk."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from tests.core.conftest import write_add_model
from workbench._types import Tensor
from workbench.core import CoreOptions, InferenceCore, InferRequest
from workbench.errors import InternalError, InvalidArgumentError, NotFoundError, UnavailableError

T = TypeVar("T")


def run(core: InferenceCore, scenario: Callable[[InferenceCore], Awaitable[T]]) -> T:
    async def main() -> T:
        await core.start()
        try:
            return await scenario(core)
        finally:
            await core.stop(timeout_s=10)

    return asyncio.run(main())


def request(model: str, x: np.ndarray, **kwargs: Any) -> InferRequest:
    return InferRequest(model_name=model, inputs={"INPUT0": Tensor("INPUT0", "FP32", x)}, **kwargs)


def ones(batch: int = 1) -> np.ndarray:
    return np.ones((batch, 4), dtype=np.float32)


def test_load_infer_metadata_and_statistics(repo: Path) -> None:
    write_add_model(repo, "add")

    async def scenario(core: InferenceCore) -> None:
        response = await core.infer(request("add", ones(2)))
        assert response.model_version == "1"
        np.testing.assert_array_equal(response.outputs[0].array, np.full((2, 4), 2, np.float32))
        meta = core.model_metadata("add")
        assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]
        assert meta["versions"] == ["1"] and meta["platform"] == "python"
        stats = core.statistics("add")["model_stats"][0]
        assert stats["inference_count"] == 2 and stats["execution_count"] == 1
        assert stats["inference_stats"]["success"]["count"] == 1
        assert stats["batch_stats"][0]["batch_size"] == 2
        assert core.ready and core.model_ready("add") and not core.model_ready("nope")

    run(InferenceCore(repo), scenario)


def test_failed_model_is_unavailable_with_reason_and_others_serve(repo: Path) -> None:
    write_add_model(repo, "good")
    broken = write_add_model(repo, "broken")
    (broken / "1" / "model.py").write_text(
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        raise RuntimeError('weights file is missing')\n"
    )

    async def scenario(core: InferenceCore) -> None:
        index = {e["name"]: e for e in core.repository_index()}
        assert index["broken"]["state"] == "UNAVAILABLE"
        assert "weights file is missing" in index["broken"]["reason"]
        assert index["good"]["state"] == "READY"
        assert (await core.infer(request("good", ones()))).outputs[0].array[0, 0] == 2
        with pytest.raises(NotFoundError, match="has no available versions.*weights file"):
            await core.infer(request("broken", ones()))
        assert not core.ready  # strict readiness: a start-up model is not ready

    run(InferenceCore(repo), scenario)


def test_request_errors_name_model_and_tensor(repo: Path) -> None:
    write_add_model(repo, "add")

    async def scenario(core: InferenceCore) -> None:
        int_input = Tensor("INPUT0", "INT32", np.ones((1, 4), np.int32))
        cases = [
            (InferRequest(model_name="add"), "missing required input"),
            (
                # the count matches, so Triton names the stranger rather than the missing one
                InferRequest(model_name="add", inputs={"IN": Tensor("IN", "FP32", ones())}),
                "unexpected inference input 'IN' for model 'add'",
            ),
            (
                InferRequest(model_name="add", inputs={"INPUT0": int_input}),
                "data-type is 'INT32', but model 'add' expects 'FP32'",
            ),
            (request("add", np.ones((1, 3), np.float32)), r"Expected \[-1,4\], got \[1,3\]"),
            (request("add", ones(9)), "batch-size must be <= 8"),
            (request("add", ones(), requested_outputs=["NOPE"]), "unexpected inference output"),
        ]
        for bad, message in cases:
            with pytest.raises(InvalidArgumentError, match=message):
                await core.infer(bad)
        with pytest.raises(NotFoundError, match="unknown model: 'ghost'"):
            await core.infer(request("ghost", ones()))
        with pytest.raises(NotFoundError, match="version 7 is not found"):
            await core.infer(request("add", ones(), model_version="7"))
        assert (await core.infer(request("add", ones()))).outputs[0].array[0, 0] == 2

    run(InferenceCore(repo), scenario)


def test_explicit_mode_loads_only_what_is_asked(repo: Path) -> None:
    write_add_model(repo, "a")
    write_add_model(repo, "b")
    options = CoreOptions(control_mode="explicit", load_models=["a"])

    async def scenario(core: InferenceCore) -> None:
        assert core.model_ready("a") and not core.model_ready("b")
        assert {"name": "b"} in core.repository_index()
        await core.load("b")
        assert core.model_ready("b")
        await core.unload("a")
        assert not core.model_ready("a")
        states = {e["name"]: e.get("state") for e in core.repository_index()}
        assert states == {"a": "UNAVAILABLE", "b": "READY"}
        with pytest.raises(InternalError, match="failed to poll from model repository"):
            await core.load("missing")

    run(InferenceCore(repo, options), scenario)


def test_none_mode_refuses_load_api(repo: Path) -> None:
    write_add_model(repo, "a")

    async def scenario(core: InferenceCore) -> None:
        with pytest.raises(UnavailableError, match="explicit model load / unload is not allowed"):
            await core.load("a")

    run(InferenceCore(repo), scenario)


def test_reload_under_traffic_loses_no_request(repo: Path) -> None:
    model = write_add_model(repo, "m", delta=1.0, sleep=0.01)
    options = CoreOptions(control_mode="explicit", load_models=["*"])

    async def scenario(core: InferenceCore) -> list[float]:
        results: list[float] = []
        stop = asyncio.Event()

        async def client() -> None:
            while not stop.is_set():
                response = await core.infer(request("m", ones()))
                results.append(float(response.outputs[0].array[0, 0]))

        clients = [asyncio.create_task(client()) for _ in range(4)]
        await asyncio.sleep(0.2)
        write_add_model(repo, "m", delta=2.0, sleep=0.01)
        await core.load("m")
        await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*clients)  # any failed request raises here
        after = await core.infer(request("m", ones()))
        assert after.outputs[0].array[0, 0] == 3.0
        return results

    results = run(InferenceCore(repo, options), scenario)
    assert set(results) == {2.0, 3.0} and len(results) > 20
    assert model.exists()


def test_poll_mode_adds_reloads_and_removes(repo: Path) -> None:
    write_add_model(repo, "a")
    options = CoreOptions(control_mode="poll", poll_secs=0.1)

    async def wait_for(predicate: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 10
        while not predicate():
            assert time.monotonic() < deadline, "poll did not pick up the change"
            await asyncio.sleep(0.05)

    async def scenario(core: InferenceCore) -> None:
        write_add_model(repo, "b", delta=5.0)
        await wait_for(lambda: core.model_ready("b"))
        assert (await core.infer(request("b", ones()))).outputs[0].array[0, 0] == 6.0
        time.sleep(0.01)  # make sure the mtime differs
        write_add_model(repo, "b", delta=6.0)
        deadline = time.monotonic() + 10
        while (await core.infer(request("b", ones()))).outputs[0].array[0, 0] != 7.0:
            assert time.monotonic() < deadline, "poll did not reload the modified model"
            await asyncio.sleep(0.05)
        shutil.rmtree(repo / "a")
        await wait_for(lambda: not core.model_ready("a"))

    run(InferenceCore(repo, options), scenario)


MEET_MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        # say "started", then wait (a minute at most) until another execute has started too
        open(os.path.join(FOLDER, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(FOLDER)) < 2 and time.monotonic() < deadline:
            time.sleep(0.001)
        met = np.full((1, 4), float(len(os.listdir(FOLDER)) >= 2), np.float32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", met)]) for _ in requests]
"""


def test_instances_execute_concurrently(repo: Path, tmp_path: Path) -> None:
    # Order of events, not a speed-up (a loaded machine stalls): each execute waits until the
    # other has started, so both answer 1 only if two instances ran them at the same time.
    folder = tmp_path / "meet"
    folder.mkdir()
    model = write_add_model(repo, "meet", count=2)
    (model / "1" / "model.py").write_text(MEET_MODEL.replace("FOLDER", repr(str(folder))))

    async def scenario(core: InferenceCore) -> list[float]:
        results = await asyncio.gather(*(core.infer(request("meet", ones())) for _ in range(2)))
        return [float(r.outputs[0].array[0, 0]) for r in results]

    assert run(InferenceCore(repo), scenario) == [1.0, 1.0]


def test_version_policy_latest_two(repo: Path) -> None:
    for version in (1, 2, 3):
        write_add_model(repo, "v", delta=float(version), version=version)
    config = repo / "v" / "config.pbtxt"
    config.write_text(config.read_text() + "version_policy { latest { num_versions: 2 } }\n")

    async def scenario(core: InferenceCore) -> None:
        assert core.model_metadata("v")["versions"] == ["2", "3"]
        assert (await core.infer(request("v", ones()))).model_version == "3"
        two = await core.infer(request("v", ones(), model_version="2"))
        assert two.outputs[0].array[0, 0] == 3.0
        with pytest.raises(NotFoundError):
            await core.infer(request("v", ones(), model_version="1"))

    run(InferenceCore(repo), scenario)
