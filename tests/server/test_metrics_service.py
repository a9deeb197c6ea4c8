"""``MetricsService`` on a real core with python models in stub processes: the values match
the traffic sent and the statistics extension; custom metrics cross from the stubs."""

from __future__ import annotations

import asyncio
import re
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from workbench._types import Tensor
from workbench.core import CoreOptions, InferenceCore
from workbench.core.request import InferRequest
from workbench.errors import UnavailableError, WorkbenchError
from workbench.server.metrics import MetricsOptions, MetricsService, parse_metrics_config

# --- helpers shared with the conformance test --------------------------------------------------

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


# --- the tests ------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_metrics_repository(tmp_path / "models")


def run_with_metrics(
    repo: Path,
    models: list[str],
    body: Callable[[InferenceCore, MetricsService], Awaitable[Any]],
    settings: tuple[str, ...] = (),
) -> Any:
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


def test_counts_failures_and_pending_match_the_traffic(repo: Path) -> None:
    async def body(core: InferenceCore, service: MetricsService) -> None:
        status, content_type, text = await scrape(service)
        assert (status, content_type) == (200, "text/plain; charset=utf-8")
        before = Exposition(text)
        assert before.value("nv_inference_request_success", model="slow", version="1") == 0
        assert before.value("nv_inference_pending_request_count", model="slow") == 0

        # One executes (0.4 s); two wait and time out after 150 ms: REJECTED.
        waiting = [asyncio.ensure_future(core.infer(fp32_request("slow", 1.0))) for _ in range(3)]
        await asyncio.sleep(0.08)
        during = Exposition((await scrape(service))[2])
        assert during.value("nv_inference_pending_request_count", model="slow") == 2
        results = await asyncio.gather(*waiting, return_exceptions=True)
        assert sum(isinstance(r, UnavailableError) for r in results) == 2
        with pytest.raises(WorkbenchError, match="negative input"):  # raised in execute: BACKEND
            await core.infer(fp32_request("slow", -1.0))

        after = Exposition((await scrape(service))[2])
        labels = {"model": "slow", "version": "1"}
        assert after.value("nv_inference_request_success", **labels) == 1
        assert after.value("nv_inference_request_failure", reason="REJECTED", **labels) == 2
        assert after.value("nv_inference_request_failure", reason="BACKEND", **labels) == 1
        assert after.value("nv_inference_request_failure", reason="OTHER", **labels) == 0
        assert after.value("nv_inference_request_failure", reason="CANCELED", **labels) == 0
        assert after.value("nv_inference_count", **labels) == 1
        assert after.value("nv_inference_exec_count", **labels) == 2
        assert after.value("nv_inference_pending_request_count", **labels) == 0
        assert after.value("nv_model_load_duration_secs", **labels) > 0

        stats = core.statistics("slow")["model_stats"][0]
        inference = stats["inference_stats"]
        assert inference["fail"]["count"] == 3
        assert inference["success"]["count"] == 1
        for counter, field in [
            ("nv_inference_request_duration_us", "success"),
            ("nv_inference_queue_duration_us", "queue"),
            ("nv_inference_compute_infer_duration_us", "compute_infer"),
        ]:
            assert after.value(counter, **labels) == inference[field]["ns"] // 1000
        assert after.value("nv_inference_request_duration_us", **labels) >= 400_000
        assert after.types["nv_inference_pending_request_count"] == "gauge"
        assert not any(name.endswith("_summary_us") for name in after.types)

    run_with_metrics(repo, ["slow"], body)


def test_custom_metrics_from_a_stub_process_and_summaries(repo: Path) -> None:
    async def body(core: InferenceCore, service: MetricsService) -> None:
        for value in (0.5, 5.0, 50.0):
            await core.infer(fp32_request("custom_metrics", value))
        # No wait: the updates travel with the reply of each execute.
        text = (await scrape(service))[2]
        metrics = Exposition(text)
        labels = {"kind": "test", "model": "custom_metrics"}
        assert metrics.types["custom_requests_total"] == "counter"
        assert metrics.help["custom_requests_total"] == "Requests seen by the custom model"
        assert metrics.value("custom_requests_total", **labels) == 3
        assert metrics.value("custom_last_value", **labels) == 50
        assert metrics.value("custom_value_histogram_count", **labels) == 3
        assert metrics.value("custom_value_histogram_sum", **labels) == 55.5
        buckets = {"1": 1, "10": 2, "100": 3, "+Inf": 3}
        for bound, count in buckets.items():
            assert metrics.value("custom_value_histogram_bucket", le=bound, **labels) == count
        assert 'custom_value_histogram_bucket{kind="test",model="custom_metrics",le="1"} 1' in text

        version = {"model": "custom_metrics", "version": "1"}
        assert metrics.types["nv_inference_request_summary_us"] == "summary"
        assert metrics.value("nv_inference_request_summary_us_count", **version) == 3
        quantiles = [
            lb["quantile"]
            for n, lb, _ in metrics.samples
            if n == "nv_inference_queue_summary_us" and lb["model"] == "custom_metrics"
        ]
        assert quantiles == ["0.5", "0.99"]
        stats = core.statistics("custom_metrics")["model_stats"][0]["inference_stats"]
        summed = metrics.value("nv_inference_compute_infer_summary_us_sum", **version)
        assert abs(summed - stats["compute_infer"]["ns"] / 1000) < 3  # per-request truncation
        assert not metrics.has("nv_inference_request_duration_us")  # counter_latencies=false
        assert metrics.value("nv_inference_request_success", **version) == 3

        await core.unload("custom_metrics")
        gone = Exposition((await scrape(service))[2])
        assert not gone.has("nv_inference_request_success", model="custom_metrics")
        assert not gone.has("custom_requests_total")
        assert "custom_requests_total" in gone.types  # the family stays, as in Triton

    settings = (
        "summary_latencies=true",
        "summary_quantiles=0.5:0.05,0.99:0.001",
        "counter_latencies=false",
    )
    run_with_metrics(repo, ["custom_metrics"], body, settings)


def test_other_paths_and_methods_answer_as_triton(repo: Path) -> None:
    async def body(core: InferenceCore, service: MetricsService) -> None:
        assert (await scrape(service, "/metrics/"))[0] == 200
        assert (await scrape(service, "/other"))[0::2] == (200, "")
        status, content_type, text = await scrape(service, method="POST")
        assert (status, content_type, text) == (
            405,
            "application/json",
            '{"error":"Method Not Allowed"}',
        )
        metrics = Exposition((await scrape(service))[2])
        assert metrics.value("nv_cpu_memory_total_bytes") > 0
        assert 0 <= metrics.value("nv_cpu_utilization") <= 1
        assert metrics.value("nv_pinned_memory_pool_total_bytes") == 0
        assert not metrics.has("nv_inference_request_success")  # nothing loaded

    run_with_metrics(repo, [], body)


def test_gpu_metrics_appear_with_nvml_and_respect_allow_gpu(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.server.test_metrics_exposition import FakeNvml

    monkeypatch.setattr("workbench.server.metrics._system.load_nvml", FakeNvml)

    async def body(core: InferenceCore, service: MetricsService) -> None:
        metrics = Exposition((await scrape(service))[2])
        assert metrics.value("nv_gpu_utilization", gpu_uuid="GPU-00000000") == 0.37
        assert metrics.types["nv_energy_consumption"] == "counter"
        order = list(metrics.types)
        assert order.index("nv_energy_consumption") < order.index("nv_gpu_utilization")
        assert order.index("nv_pinned_memory_pool_used_bytes") < order.index("nv_gpu_utilization")
        assert order.index("nv_gpu_power_limit") < order.index("nv_cpu_utilization")

    run_with_metrics(repo, [], body)

    async def without_gpu() -> None:
        core = InferenceCore(repo, CoreOptions(control_mode="explicit"))
        service = MetricsService(core, MetricsOptions(allow_gpu=False, allow_cpu=False))
        await service.start()
        metrics = Exposition((await scrape(service))[2])
        await service.stop()
        assert not metrics.has("nv_gpu_utilization") and not metrics.has("nv_cpu_utilization")
        assert metrics.has("nv_pinned_memory_pool_total_bytes")

    asyncio.run(without_gpu())
