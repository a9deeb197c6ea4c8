"""``/metrics`` side by side with real Triton 2.51, for the same traffic on the same models.

Family names, types, help texts and label sets must match; so must every count (successes,
failures by reason, inferences, executions, the pending gauge at rest, custom metrics and
summary counts). Durations and CPU/memory values differ by nature and are not compared;
nor does the pinned memory pool, which Triton sizes at 256 MiB and we do not have (0 here).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.peers import Peers, TritonServerProcess
from tests.integration.scheduling_harness import fp32, infer
from tests.server.metrics.exposition import (
    Exposition,
    fp32_request,
    scrape,
    write_metrics_repository,
)
from workbench.backends.python import CUSTOM_METRICS
from workbench.core import CoreOptions, InferenceCore
from workbench.errors import WorkbenchError
from workbench.server.metrics import MetricsOptions, MetricsService, parse_metrics_config

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

MODELS = ["custom_metrics", "slow"]
SETTINGS = ("summary_latencies=true",)
#: families only we report: Triton added the load duration after 2.51
OURS_ONLY = {"nv_model_load_duration_secs"}
#: counts compared exactly (per series)
COUNTS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_pending_request_count",
    "custom_requests_total",
    "custom_last_value",
    "custom_value_histogram_count",
    "custom_value_histogram_sum",
    "custom_value_histogram_bucket",
    "nv_inference_request_summary_us_count",
    "nv_inference_queue_summary_us_count",
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_metrics_repository(tmp_path_factory.mktemp("metrics") / "models")


@pytest.fixture(scope="module")
def triton_metrics(peers: Peers, repository: Path) -> Iterator[TritonServerProcess]:
    extra = [f"--metrics-config={setting}" for setting in SETTINGS]
    log = repository.parent / "tritonserver.log"
    with TritonServerProcess(
        peers, repository, log_path=log, load_models=MODELS, extra_args=extra
    ) as server:
        yield server


def _triton_traffic(server: TritonServerProcess) -> tuple[str, list[int]]:
    """The traffic on real Triton; its ``/metrics`` text and the slow requests' statuses."""
    port = server.http_port
    for value in (0.5, 5.0, 50.0):
        assert infer(port, "custom_metrics", [fp32("INPUT0", 1, [value])])["status"] == 200
    with ThreadPoolExecutor(3) as pool:
        slow = list(pool.map(lambda _: infer(port, "slow", [fp32("INPUT0", 1, [1.0])]), range(3)))
    assert infer(port, "slow", [fp32("INPUT0", 1, [-1.0])])["status"] == 500
    with urllib.request.urlopen(server.metrics_url, timeout=30) as reply:
        return reply.read().decode(), sorted(r["status"] for r in slow)


def _our_traffic(repository: Path) -> tuple[str, list[int]]:
    async def main() -> tuple[str, list[int]]:
        options = CoreOptions(control_mode="explicit", load_models=MODELS)
        core = InferenceCore(repository, options)
        service = MetricsService(core, MetricsOptions(config=parse_metrics_config(SETTINGS)))
        await core.start()
        await service.start()
        try:
            for value in (0.5, 5.0, 50.0):
                await core.infer(fp32_request("custom_metrics", value))
            slow = await asyncio.gather(
                *(core.infer(fp32_request("slow", 1.0)) for _ in range(3)), return_exceptions=True
            )
            with pytest.raises(WorkbenchError):
                await core.infer(fp32_request("slow", -1.0))
            statuses = sorted(503 if isinstance(r, WorkbenchError) else 200 for r in slow)
            return (await scrape(service))[2], statuses
        finally:
            await service.stop()
            await core.stop()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def both(triton_metrics: TritonServerProcess, repository: Path) -> tuple[Exposition, Exposition]:
    real_text, real_statuses = _triton_traffic(triton_metrics)
    # Custom families live as long as the process (as in Triton): those that earlier tests in
    # this pytest process created are not part of this comparison.
    earlier = {family.name for family in CUSTOM_METRICS.families()}
    ours_text, our_statuses = _our_traffic(repository)
    assert real_statuses == our_statuses == [200, 503, 503]
    real, ours = Exposition(real_text), Exposition(ours_text)
    for name in earlier - set(real.types):
        ours.types.pop(name, None)
        ours.help.pop(name, None)
    return real, ours


def _label_sets(metrics: Exposition) -> dict[str, set[tuple[str, ...]]]:
    sets: dict[str, set[tuple[str, ...]]] = {}
    for name, labels, _ in metrics.samples:
        sets.setdefault(name, set()).add(tuple(labels))
    return sets


def _series(metrics: Exposition, names: tuple[str, ...]) -> dict[Any, float]:
    return {
        (name, tuple(sorted(labels.items()))): value
        for name, labels, value in metrics.samples
        if name in names
    }


def test_same_families_types_and_help(both: tuple[Exposition, Exposition]) -> None:
    real, ours = both
    assert set(ours.types) - OURS_ONLY == set(real.types)
    assert {n: ours.types[n] for n in real.types} == real.types
    assert {n: ours.help[n] for n in real.help} == real.help


def test_same_family_order(both: tuple[Exposition, Exposition]) -> None:
    real, ours = both
    assert [name for name in ours.types if name not in OURS_ONLY] == list(real.types)


def test_same_label_names_and_series(both: tuple[Exposition, Exposition]) -> None:
    real, ours = both
    ours_sets, real_sets = _label_sets(ours), _label_sets(real)
    assert {n: s for n, s in ours_sets.items() if n not in OURS_ONLY} == real_sets
    # Every series (name and label values) Triton shows, we show, and no other.
    real_keys = {(n, tuple(sorted(lb.items()))) for n, lb, _ in real.samples}
    our_keys = {(n, tuple(sorted(lb.items()))) for n, lb, _ in ours.samples if n not in OURS_ONLY}
    assert our_keys == real_keys


def test_same_counts_for_the_same_traffic(both: tuple[Exposition, Exposition]) -> None:
    real, ours = both
    assert _series(ours, COUNTS) == _series(real, COUNTS)
    # the values behind that comparison, spelled out
    labels = {"model": "slow", "version": "1"}
    assert ours.value("nv_inference_request_failure", reason="REJECTED", **labels) == 2
    assert ours.value("nv_inference_request_failure", reason="BACKEND", **labels) == 1
