"""``GET /metrics``: Triton's Prometheus endpoint, as an ASGI app the hosting layer serves.

Families come in the order Triton's registry lists them (counters, gauges, histograms,
summaries; within each, Triton's registration order, then custom families); a built-in family
without series is left out, as Triton does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from workbench import threads
from workbench.core.contract import ObservableCore
from workbench.core.model import ServingModel
from workbench.core.response_cache import cache_for
from workbench.server.metrics._cache_metrics import cache_blocks
from workbench.server.metrics._config import MetricsOptions, ReporterConfig
from workbench.server.metrics._custom import custom_blocks
from workbench.server.metrics._exposition import MetricBlock, render
from workbench.server.metrics._model_metrics import ModelMetricBlocks, VersionMetrics
from workbench.server.metrics._summary import LatencySummaries
from workbench.server.metrics._system import CpuSampler, GpuSampler, pinned_memory_blocks
from workbench.threads import Work

log = logging.getLogger("workbench.server.metrics")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

#: Triton answers ``/metrics`` (and ``/metrics/``) with this content type
CONTENT_TYPE = b"text/plain; charset=utf-8"
_PATHS = ("/metrics", "/metrics/")


class MetricsService:
    """The metrics of one ``InferenceCore``; create it before ``core.start()``.

    Construction installs a hook on the core's model manager, so that every version loaded
    afterwards gets latency summaries when ``summary_latencies`` is on. ``start`` (on the
    serving loop) begins sampling CPU and GPU metrics; ``stop`` ends it.
    """

    def __init__(self, core: ObservableCore, options: MetricsOptions | None = None) -> None:
        self.core = core
        self.options = options or MetricsOptions()
        self.reporter = ReporterConfig.from_settings(self.options.config)
        self.cpu: CpuSampler | None = CpuSampler() if self.options.allow_cpu else None
        self.gpu: GpuSampler | None = None
        self._poller: asyncio.Task[None] | None = None
        if self.reporter.summary_latencies:
            core.on_new_version(self._attach_summaries)

    def _attach_summaries(self, model: ServingModel) -> None:
        model.stats.observer = LatencySummaries(self.reporter.quantiles, self._cache_enabled(model))

    def _cache_enabled(self, model: ServingModel) -> bool:
        return cache_for(model.config, self.core.response_cache) is not None

    # -- sampling ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open NVML (if allowed and present) and sample CPU/GPU every ``interval_ms``."""
        if self.options.allow_gpu:
            self.gpu = await threads.run(Work.SAMPLE, GpuSampler.open)
        if self.cpu is None and self.gpu is None:
            return
        await threads.run(Work.SAMPLE, self.sample)
        self._poller = asyncio.create_task(self._poll_forever())

    def sample(self) -> None:
        """Take one CPU and GPU sample (blocking: runs off the loop)."""
        if self.cpu is not None:
            self.cpu.sample()
        if self.gpu is not None:
            self.gpu.sample()

    async def _poll_forever(self) -> None:
        interval_s = max(self.options.interval_ms, 1) / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await threads.run(Work.SAMPLE, self.sample)
            except Exception:  # a sampler bug must not end sampling for good
                log.exception("sampling CPU/GPU metrics failed")

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None

    # -- the exposition ------------------------------------------------------------------------
    def versions(self) -> list[VersionMetrics]:
        """Every loaded version's labels, counters and summaries."""
        versions = []
        for name, number, model in self.core.serving_versions():
            observer = model.stats.observer
            versions.append(
                VersionMetrics(
                    labels=[("model", name), ("version", str(number))],
                    stats=model.stats.snapshot(),
                    cache_enabled=self._cache_enabled(model),
                    summaries=observer if isinstance(observer, LatencySummaries) else None,
                )
            )
        return versions

    def collect(self) -> str:
        """The exposition text of every metric, now."""
        models = ModelMetricBlocks(self.reporter)
        models.add_all(self.versions())
        custom = custom_blocks()
        counters = models.counter_blocks()
        gauges = [*models.gauge_blocks(), *pinned_memory_blocks()]
        if self.gpu is not None:
            counters.append(self.gpu.energy_block())
            gauges += self.gpu.gauge_blocks()
        if self.cpu is not None:
            gauges += self.cpu.blocks()
        gauges += cache_blocks(self.core.response_cache)
        blocks: list[MetricBlock] = [
            *counters,
            *custom["counter"],
            *gauges,
            *custom["gauge"],
            *custom["histogram"],
            *models.summary_blocks(),
        ]
        return render(blocks)

    # -- ASGI ----------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # http only: the hosting code serves this app with ASGI lifespan events off
        if scope["type"] != "http":
            return
        if scope["method"] != "GET":
            body = json.dumps({"error": "Method Not Allowed"}, separators=(",", ":")).encode()
            await _reply(send, 405, body, b"application/json")
            return
        # Triton answers any other path with 200 and no body.
        body = self.collect().encode() if scope["path"] in _PATHS else b""
        await _reply(send, 200, body, CONTENT_TYPE)


async def _reply(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
