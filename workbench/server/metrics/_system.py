"""Server-wide gauges: CPU (from ``/proc``), GPU (from NVML, when there is one), pinned memory.

Samplers are polled every ``--metrics-interval-ms`` off the loop; ``/metrics`` reports the
last sample. CPU utilisation and used memory are computed as Triton does: busy jiffies over
all jiffies since the previous sample, and ``MemTotal - MemAvailable``.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from workbench.cpu_times import BUSY, IDLE, read_cpu_times
from workbench.server.metrics._exposition import MetricBlock

log = logging.getLogger("workbench.server.metrics")


def cpu_utilization(new: dict[str, int], old: dict[str, int]) -> float:
    """Busy share of the jiffies between two samples, in [0, 1] (counters that went back: 0)."""
    busy = sum(max(new[f] - old[f], 0) for f in BUSY)
    idle = sum(max(new[f] - old[f], 0) for f in IDLE)
    return busy / (busy + idle) if busy + idle else 0.0


def read_memory(path: Path = Path("/proc/meminfo")) -> tuple[int, int] | None:
    """(total, used) bytes from ``/proc/meminfo`` (used = MemTotal - MemAvailable)."""
    info: dict[str, int] = {}
    try:
        with path.open() as meminfo:
            for line in meminfo:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts:
                    info[name] = int(parts[0]) * 1024
    except (OSError, ValueError):
        return None
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None or available is None or available > total:
        return None
    return total, total - available


class CpuSampler:
    """``nv_cpu_utilization`` and ``nv_cpu_memory_{total,used}_bytes``."""

    def __init__(self, stat: Path = Path("/proc/stat"), meminfo: Path = Path("/proc/meminfo")):
        self._stat, self._meminfo = stat, meminfo
        self._last = read_cpu_times(stat)
        self.utilization = 0.0
        self.memory_total = 0
        self.memory_used = 0

    def sample(self) -> None:
        times = read_cpu_times(self._stat)
        if times is not None and self._last is not None:
            self.utilization = cpu_utilization(times, self._last)
        self._last = times or self._last
        memory = read_memory(self._meminfo)
        self.memory_total, self.memory_used = memory if memory is not None else (0, 0)

    def blocks(self) -> list[MetricBlock]:
        values = [
            ("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", self.utilization),
            ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", self.memory_total),
            ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", self.memory_used),
        ]
        return [_gauge(name, text, value) for name, text, value in values]


@dataclass(slots=True)
class GpuSample:
    uuid: str
    utilization: float = 0.0
    memory_total: int = 0
    memory_used: int = 0
    power_usage: float = 0.0
    power_limit: float = 0.0
    #: joules since the server started
    energy: float = 0.0
    #: the device's energy counter (mJ) when sampling began
    energy_start_mj: int | None = None


_GPU_GAUGES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "utilization"),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "memory_total"),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "memory_used"),
    ("nv_gpu_power_usage", "GPU power usage in watts", "power_usage"),
    ("nv_gpu_power_limit", "GPU power management limit in watts", "power_limit"),
)
ENERGY = (
    "nv_energy_consumption",
    "GPU energy consumption in joules since the Triton Server started",
)


def load_nvml() -> ModuleType | None:
    """The NVML bindings (``pynvml``, from the ``nvidia-ml-py`` package), or None."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


class GpuSampler:
    """GPU gauges and the energy counter from NVML, per visible device (``gpu_uuid`` label).

    ``open`` returns None when NVML is not installed, fails to start, or sees no GPU: then
    there are simply no GPU metrics, as with a Triton built without them.
    """

    def __init__(self, nvml: Any, handles: list[Any], samples: list[GpuSample]) -> None:
        self._nvml = nvml
        self._handles = handles
        self.samples = samples

    @classmethod
    def open(cls, nvml: Any | None = None) -> GpuSampler | None:
        nvml = nvml if nvml is not None else load_nvml()
        if nvml is None:
            return None
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError: no driver, no device
            log.info("GPU metrics unavailable: NVML did not start (%s)", exc)
            return None
        try:
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
            samples = [GpuSample(_text(nvml.nvmlDeviceGetUUID(h))) for h in handles]
        except Exception as exc:
            log.warning("GPU metrics unavailable: %s", exc)
            _shutdown(nvml)
            return None
        if not handles:
            _shutdown(nvml)
            return None
        return cls(nvml, handles, samples)

    def sample(self) -> None:
        for handle, sample in zip(self._handles, self.samples, strict=True):
            try:
                self._sample_one(handle, sample)
            except Exception as exc:  # one failing query must not stop the others
                log.warning("cannot read GPU %s metrics: %s", sample.uuid, exc)

    def _sample_one(self, handle: Any, sample: GpuSample) -> None:
        nvml = self._nvml
        sample.utilization = nvml.nvmlDeviceGetUtilizationRates(handle).gpu * 0.01
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        sample.memory_total, sample.memory_used = int(memory.total), int(memory.used)
        sample.power_usage = nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        sample.power_limit = nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
        energy_mj = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
        if sample.energy_start_mj is None:
            sample.energy_start_mj = energy_mj
        sample.energy = (energy_mj - sample.energy_start_mj) / 1000.0

    def gauge_blocks(self) -> list[MetricBlock]:
        blocks = []
        for name, text, field in _GPU_GAUGES:
            block = MetricBlock(name, text, "gauge")
            for sample in self.samples:
                block.add([("gpu_uuid", sample.uuid)], getattr(sample, field))
            blocks.append(block)
        return blocks

    def energy_block(self) -> MetricBlock:
        block = MetricBlock(*ENERGY, "counter")
        for sample in self.samples:
            block.add([("gpu_uuid", sample.uuid)], sample.energy)
        return block

    def close(self) -> None:
        _shutdown(self._nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:  # already shut down, or the library is half gone
        pass


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def pinned_memory_blocks() -> list[MetricBlock]:
    """Triton's pinned-memory pool gauges: there is no pinned pool here, so 0 (as Triton
    reports without a GPU)."""
    return [
        _gauge(
            "nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes", 0
        ),
        _gauge(
            "nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes", 0
        ),
    ]


def _gauge(name: str, text: str, value: float) -> MetricBlock:
    block = MetricBlock(name, text, "gauge")
    block.add([], value)
    return block
