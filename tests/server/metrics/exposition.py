"""The metrics exposition read back, a core served with metrics, the models and requests the
metrics tests use, and a fake NVML."""

from __future__ import annotations

import asyncio
import re
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from workbench._types import Tensor
from workbench.core import CoreOptions, InferenceCore
from workbench.core.request import InferRequest
from workbench.server.metrics import MetricsOptions, MetricsService, parse_metrics_config

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Exposition:
    """A parsed ``/metrics`` text: family types, help texts and samples."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.types: dict[str, str] = {}
        self.help: dict[str, str] = {}
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
            elif line.startswith("# HELP "):
                _, _, name, text_ = line.split(" ", 3)
                self.help[name] = text_
            elif line:
                match = _SAMPLE.match(line)
                assert match is not None, f"not a sample line: {line!r}"
                name, labels, value = match.groups()
                parsed = dict(_LABEL.findall(labels or ""))
                self.samples.append((name, parsed, float(value.replace("Nan", "nan"))))

    def value(self, name: str, **labels: str) -> float:
        """The one sample of ``name`` whose labels include ``labels``."""
        found = [v for n, lb, v in self.samples if n == name and labels.items() <= lb.items()]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0]

    def has(self, name: str, **labels: str) -> bool:
        return any(n == name and labels.items() <= lb.items() for n, lb, _ in self.samples)


def run_with_metrics(
    repo: Path,
    models: list[str],
    body: Callable[[InferenceCore, MetricsService], Awaitable[Any]],
    settings: tuple[str, ...] = (),
) -> Any:
    """``body(core, service)`` with ``models`` loaded from ``repo`` and a metrics service
    sampling every 50 ms (``settings``: ``--metrics-config`` values); both stopped after."""

    async def main() -> Any:
        core = InferenceCore(repo, CoreOptions(control_mode="explicit", load_models=models))
        options = MetricsOptions(interval_ms=50, config=parse_metrics_config(settings))
        service = MetricsService(core, options)
        await core.start()
        await service.start()
        try:
            return await body(core, service)
        finally:
            await service.stop()
            await core.stop()

    return asyncio.run(main())


async def scrape(app: Any, path: str = "/metrics", method: str = "GET") -> tuple[int, str, str]:
    """Call the ASGI app once: (status, content type, body)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": []}
    await app(scope, receive, send)
    headers = dict(sent[0]["headers"])
    return sent[0]["status"], headers[b"content-type"].decode(), sent[1]["body"].decode()


SLOW_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 1
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]
dynamic_batching {{
  default_queue_policy {{ timeout_action: REJECT, default_timeout_microseconds: 150000 }}
}}
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


SLOW_MODEL = """
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.4)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if (x < 0).any():
                raise ValueError("negative input")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


CUSTOM_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] }} ]
instance_group [ {{ count: 1, kind: KIND_CPU }} ]
"""


CUSTOM_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": "custom_metrics", "kind": "test"}
        counter = pb_utils.MetricFamily(
            name="custom_requests_total",
            description="Requests seen by the custom model",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        gauge = pb_utils.MetricFamily(
            name="custom_last_value",
            description="Last INPUT0[0] seen",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        histogram = pb_utils.MetricFamily(
            name="custom_value_histogram",
            description="Distribution of INPUT0[0]",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.families = (counter, gauge, histogram)
        self.requests = counter.Metric(labels=labels)
        self.last = gauge.Metric(labels=labels)
        self.histogram = histogram.Metric(labels=labels, buckets=[1.0, 10.0, 100.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            value = float(x.flat[0])
            self.requests.increment(1)
            self.last.set(value)
            self.histogram.observe(value)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""


def write_model(root: Path, name: str, config: str, model: str) -> None:
    folder = root / name / "1"
    folder.mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(textwrap.dedent(config.format(name=name)))
    (folder / "model.py").write_text(textwrap.dedent(model))


def write_metrics_repository(root: Path) -> Path:
    """``slow`` (0.4 s per execute, 150 ms queue timeout, raises on negatives) and
    ``custom_metrics`` (a counter, a gauge and a histogram of its own)."""
    write_model(root, "slow", SLOW_CONFIG, SLOW_MODEL)
    write_model(root, "custom_metrics", CUSTOM_CONFIG, CUSTOM_MODEL)
    return root


def fp32_request(model: str, value: float) -> InferRequest:
    array = np.array([[value]], dtype=np.float32)
    return InferRequest(model, inputs={"INPUT0": Tensor("INPUT0", "FP32", array)})


class FakeNvml:
    """The calls ``GpuSampler`` makes on ``pynvml``, for one device."""

    def __init__(self, count: int = 1, fail_init: bool = False) -> None:
        self.count, self.fail_init = count, fail_init
        self.energy_mj = 5_000
        self.shut_down = False

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:  # noqa: N802
        return f"GPU-{handle:08d}".encode()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=37, memory=5)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        return SimpleNamespace(total=16 * 2**30, used=2**30, free=15 * 2**30)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802
        return 71_500  # mW

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:  # noqa: N802
        return 300_000

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:  # noqa: N802
        return self.energy_mj
