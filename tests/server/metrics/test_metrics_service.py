"""``MetricsService`` on a real core with python models in stub processes: the values match
the traffic sent and the statistics extension; custom metrics cross from the stubs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.metrics.exposition import (
    Exposition,
    fp32_request,
    run_with_metrics,
    scrape,
    write_metrics_repository,
)
from workbench.core import CoreOptions, InferenceCore
from workbench.errors import UnavailableError, WorkbenchError
from workbench.server.metrics import MetricsOptions, MetricsService


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_metrics_repository(tmp_path / "models")


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
    from tests.server.metrics.exposition import FakeNvml

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
