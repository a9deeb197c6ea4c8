"""A GPU model served by the core, and GPU metrics from the real NVML (skipped without a GPU).

The model is traced here with the torch that runs the test, so the TorchScript file matches
that torch whatever the release (a file from a newer torch may not load in an older one).
"""

from __future__ import annotations

import asyncio
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.server.metrics.exposition import Exposition, run_with_metrics, scrape
from workbench._types import Tensor
from workbench.backends.tensorrt import gpu_present
from workbench.core import InferenceCore
from workbench.core.request import InferRequest
from workbench.server.metrics import MetricsService

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_present(), reason="needs an NVIDIA GPU"),
]

CONFIG = """
name: "linear_gpu"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { }
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]
"""


def _cuda_torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch is a CPU build")
    return torch


def _linear_repository(torch: Any, root: Path) -> Any:
    """``root/linear_gpu``: a traced ``Linear(4, 3)`` on two KIND_GPU instances; the module."""
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 3).eval()
    folder = root / "linear_gpu"
    (folder / "1").mkdir(parents=True)
    with warnings.catch_warnings():  # torch >= 2.10 calls jit.trace deprecated; Triton loads it
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(module, torch.ones(1, 4)).save(str(folder / "1" / "model.pt"))
    (folder / "config.pbtxt").write_text(textwrap.dedent(CONFIG))
    return module


def test_kind_gpu_instances_compute_on_the_device_and_match_cpu(tmp_path: Path) -> None:
    torch = _cuda_torch()
    module = _linear_repository(torch, tmp_path)
    rows = np.arange(24, dtype=np.float32).reshape(6, 4) / 7
    with torch.no_grad():
        expected = module(torch.from_numpy(rows)).numpy()

    async def body(core: InferenceCore, service: MetricsService) -> None:
        allocated = torch.cuda.memory_allocated(0)
        pairs = [rows[i : i + 2] for i in range(0, 6, 2)]
        requests = [
            InferRequest("linear_gpu", inputs={"INPUT__0": Tensor("INPUT__0", "FP32", pair)})
            for pair in pairs
        ]
        responses = await asyncio.gather(*(core.infer(r) for r in requests))
        got = np.concatenate([r.outputs[0].array for r in responses])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        # the weights of both instances live on GPU 0, not on the CPU
        assert allocated > 0
        stats = core.statistics("linear_gpu")["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 3

    run_with_metrics(tmp_path, ["linear_gpu"], body)


def test_gpu_metrics_read_the_real_device(tmp_path: Path) -> None:
    torch = _cuda_torch()
    pynvml = pytest.importorskip("pynvml")
    _linear_repository(torch, tmp_path)
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
    finally:
        pynvml.nvmlShutdown()

    async def body(core: InferenceCore, service: MetricsService) -> None:
        block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")  # 256 MiB held
        await asyncio.sleep(0.2)  # a few sampling intervals of 50 ms
        first = Exposition((await scrape(service))[2])
        await asyncio.sleep(0.3)
        second = Exposition((await scrape(service))[2])
        del block
        assert first.value("nv_gpu_memory_total_bytes", gpu_uuid=uuid) == total
        assert first.value("nv_gpu_memory_used_bytes", gpu_uuid=uuid) >= 256 * 2**20
        assert 0 <= first.value("nv_gpu_utilization", gpu_uuid=uuid) <= 1
        assert first.value("nv_gpu_power_limit", gpu_uuid=uuid) > 0
        assert first.value("nv_gpu_power_usage", gpu_uuid=uuid) > 0
        assert first.types["nv_energy_consumption"] == "counter"
        energy = first.value("nv_energy_consumption", gpu_uuid=uuid)
        assert second.value("nv_energy_consumption", gpu_uuid=uuid) >= energy >= 0

    run_with_metrics(tmp_path, ["linear_gpu"], body)
