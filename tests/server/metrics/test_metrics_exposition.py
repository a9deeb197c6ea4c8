"""The text format as Triton writes it, summaries' quantiles and window, CPU and GPU sampling."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.server.metrics.exposition import FakeNvml
from workbench.server.metrics._exposition import MetricBlock, format_value, render
from workbench.server.metrics._summary import MAX_AGE_S, LatencySummaries, Summary, window_quantile
from workbench.server.metrics._system import (
    CpuSampler,
    GpuSampler,
    cpu_utilization,
    read_cpu_times,
    read_memory,
)


@pytest.mark.parametrize(
    ("value", "text"),
    [(3, "3"), (50.0, "50"), (55.5, "55.5"), (0.0001983642578125, "0.0001983642578125"),
     (math.nan, "Nan"), (math.inf, "+Inf"), (-math.inf, "-Inf"), (1e17, "1e+17")],
)  # fmt: skip
def test_numbers_are_written_as_prometheus_cpp_does(value: float, text: str) -> None:
    assert format_value(value) == text


def test_families_render_with_help_type_and_escaped_labels() -> None:
    counter = MetricBlock("c_total", "A help\\text\nline", "counter")
    counter.add([("model", 'a"b'), ("version", "1")], 2)
    empty = MetricBlock("nothing", "no series", "gauge")
    kept = MetricBlock("custom", "kept when empty", "gauge", always=True)
    summary = MetricBlock("s_us", "a summary", "summary")
    summary.add_summary([("model", "m")], 2, 30.0, [(0.5, 10.0), (0.9, math.nan)])
    histogram = MetricBlock("h", "a histogram", "histogram")
    histogram.add_histogram([("k", "v")], 3, 55.5, [1.0, 10.0], [1, 1])
    assert render([counter, empty, kept, summary, histogram]) == (
        "# HELP c_total A help\\\\text\\nline\n# TYPE c_total counter\n"
        'c_total{model="a\\"b",version="1"} 2\n'
        "# HELP custom kept when empty\n# TYPE custom gauge\n"
        "# HELP s_us a summary\n# TYPE s_us summary\n"
        's_us_count{model="m"} 2\ns_us_sum{model="m"} 30\n'
        's_us{model="m",quantile="0.5"} 10\ns_us{model="m",quantile="0.9"} Nan\n'
        "# HELP h a histogram\n# TYPE h histogram\n"
        'h_count{k="v"} 3\nh_sum{k="v"} 55.5\nh_bucket{k="v",le="1"} 1\n'
        'h_bucket{k="v",le="10"} 2\nh_bucket{k="v",le="+Inf"} 3\n'
    )


def test_quantiles_pick_what_tritons_estimator_picks() -> None:
    # Observed on tritonserver 2.51 with 3 samples [860, 1228, 161000]: 0.5 -> 860, 0.99 -> 1228.
    samples = [860.0, 1228.0, 161000.0]
    assert window_quantile(samples, 0.5) == 860
    assert window_quantile(samples, 0.99) == 1228
    assert window_quantile([7.0], 0.999) == 7
    assert math.isnan(window_quantile([], 0.5))
    hundred = [float(i) for i in range(1, 101)]
    assert window_quantile(hundred, 0.9) == 90


def test_summary_window_forgets_old_samples_but_keeps_count_and_sum() -> None:
    summary = Summary([(0.5, 0.05)])
    summary.observe(100.0, now=0.0)
    summary.observe(300.0, now=30.0)
    assert summary.snapshot(now=31.0) == (2, 400.0, [(0.5, 100.0)])
    assert summary.snapshot(now=MAX_AGE_S + 1) == (2, 400.0, [(0.5, 300.0)])
    count, total, [(_, value)] = summary.snapshot(now=2 * MAX_AGE_S + 31)
    assert (count, total) == (2, 400.0) and math.isnan(value)


def test_summary_memory_is_bounded_under_load() -> None:
    summary = Summary([(0.5, 0.05)])
    for i in range(20_000):
        summary.observe(float(i % 100), now=1.0)
    count, _, [(_, median)] = summary.snapshot(now=2.0)
    assert count == 20_000 and 40 <= median <= 60
    assert sum(len(samples) for _, _, samples in summary._buckets) <= 4096


def test_latency_summaries_follow_tritons_choice_with_and_without_cache() -> None:
    plain = LatencySummaries([(0.5, 0.05)], cache_enabled=False)
    cached = LatencySummaries([(0.5, 0.05)], cache_enabled=True)
    assert "request" in plain.summaries and "cache_hit" not in plain.summaries
    assert "request" not in cached.summaries and "cache_miss" in cached.summaries
    plain.observe("request", 12.0)
    plain.observe("cache_hit", 5.0)  # not reported without a cache: ignored
    assert plain.summaries["request"].snapshot()[:2] == (1, 12.0)


def test_cpu_metrics_from_proc_files(tmp_path: Path) -> None:
    stat, meminfo = tmp_path / "stat", tmp_path / "meminfo"
    stat.write_text("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n")
    meminfo.write_text(
        "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    250 kB\n"
    )
    sampler = CpuSampler(stat, meminfo)
    stat.write_text("cpu  150 0 150 750 150 0 0 0 0 0\n")
    sampler.sample()
    assert sampler.utilization == pytest.approx(100 / 200)
    assert (sampler.memory_total, sampler.memory_used) == (1024000, 768000)
    names = [block.name for block in sampler.blocks()]
    assert names == ["nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"]
    assert read_cpu_times(tmp_path / "missing") is None
    meminfo.write_text("MemTotal: 10 kB\n")
    assert read_memory(meminfo) is None
    old = {f: 5 for f in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")}
    assert cpu_utilization(old, old) == 0.0


def test_gpu_metrics_from_nvml() -> None:
    nvml = FakeNvml()
    sampler = GpuSampler.open(nvml)
    assert sampler is not None
    sampler.sample()
    nvml.energy_mj += 2_500
    sampler.sample()
    text = render([*sampler.gauge_blocks(), sampler.energy_block()])
    assert 'nv_gpu_utilization{gpu_uuid="GPU-00000000"} 0.37' in text
    assert 'nv_gpu_memory_total_bytes{gpu_uuid="GPU-00000000"} 17179869184' in text
    assert 'nv_gpu_memory_used_bytes{gpu_uuid="GPU-00000000"} 1073741824' in text
    assert 'nv_gpu_power_usage{gpu_uuid="GPU-00000000"} 71.5' in text
    assert 'nv_gpu_power_limit{gpu_uuid="GPU-00000000"} 300' in text
    assert "# TYPE nv_energy_consumption counter" in text
    assert 'nv_energy_consumption{gpu_uuid="GPU-00000000"} 2.5' in text
    sampler.close()
    assert nvml.shut_down


@pytest.mark.parametrize("nvml", [FakeNvml(fail_init=True), FakeNvml(count=0)])
def test_no_nvml_or_no_gpu_means_no_gpu_metrics(nvml: FakeNvml) -> None:
    assert GpuSampler.open(nvml) is None


def test_absent_nvml_library_means_no_gpu_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("workbench.server.metrics._system.load_nvml", lambda: None)
    assert GpuSampler.open() is None
