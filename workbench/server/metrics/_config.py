"""The metrics endpoint's options, named after tritonserver's ``--metrics-*`` flags."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from workbench.errors import InvalidArgumentError

log = logging.getLogger("workbench.server.metrics")

#: Triton's default summary quantiles (quantile, allowed error)
DEFAULT_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.5, 0.05),
    (0.9, 0.01),
    (0.95, 0.001),
    (0.99, 0.001),
    (0.999, 0.001),
)
_BOOLEAN_SETTINGS = ("counter_latencies", "summary_latencies")
_KNOWN_SETTINGS = (*_BOOLEAN_SETTINGS, "summary_quantiles")


@dataclass(slots=True)
class MetricsOptions:
    """Where the endpoint listens and what it reports (``--metrics-port`` ...)."""

    #: ``--metrics-port``
    port: int = 8002
    #: ``--metrics-address``
    address: str = "127.0.0.1"
    #: ``--allow-cpu-metrics``
    allow_cpu: bool = True
    #: ``--allow-gpu-metrics`` (needs the NVML bindings, ``nvidia-ml-py``, and a GPU)
    allow_gpu: bool = True
    #: ``--metrics-interval-ms``: how often CPU and GPU metrics are sampled
    interval_ms: int = 2000
    #: ``--metrics-config`` settings, as ``parse_metrics_config`` returns them
    config: dict[str, str] = field(default_factory=dict)


def _format_error(setting: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"--metrics-config option format is <setting>=<value>. Got {setting}"
    )


def parse_metrics_config(settings: Sequence[str]) -> dict[str, str]:
    """``--metrics-config <setting>=<value>`` flags as a dict (a later one wins).

    The format errors are tritonserver's. Known settings are checked (Triton ignores a bad
    value silently, which hides typos): ``counter_latencies`` and ``summary_latencies`` take
    ``true`` or ``false``, ``summary_quantiles`` ``<quantile>:<error>`` pairs separated by
    commas. Unknown settings are kept, as Triton keeps them.
    """
    config: dict[str, str] = {}
    for setting in settings:
        name, found, value = setting.partition("=")
        if not found or "," in name or not name or not value:
            raise _format_error(setting)
        _check_setting(name, value)
        config[name] = value
    return config


def _check_setting(name: str, value: str) -> None:
    if name in _BOOLEAN_SETTINGS and value not in ("true", "false"):
        raise InvalidArgumentError(
            f"invalid value '{value}' for --metrics-config {name}: expected true or false"
        )
    if name == "summary_quantiles":
        parse_quantiles(value)
    elif name not in _KNOWN_SETTINGS:
        log.warning("unknown --metrics-config setting '%s' (ignored, as Triton does)", name)


def parse_quantiles(value: str) -> tuple[tuple[float, float], ...]:
    """``"0.5:0.05,0.9:0.01"`` as ((0.5, 0.05), (0.9, 0.01)); bad pairs raise."""
    pairs = []
    for pair in value.split(","):
        quantile, found, error = pair.partition(":")
        if not found:
            raise InvalidArgumentError(
                f"Invalid option: [{pair}]. No ':' delimiter found. "
                "Expected format is <quantile>:<error>"
            )
        try:
            numbers = (float(quantile), float(error))
        except ValueError:
            raise InvalidArgumentError(
                f"Invalid option: [{pair}]. Expected format is <quantile>:<error> (numbers)"
            ) from None
        if not all(0.0 <= n <= 1.0 for n in numbers):
            raise InvalidArgumentError(
                f"Invalid option: [{pair}]. The quantile and its error must be in [0, 1]"
            )
        pairs.append(numbers)
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class ReporterConfig:
    """What the per-model metrics look like, from the ``--metrics-config`` settings."""

    #: the ``*_duration_us`` counters and the per-model cache counters
    counter_latencies: bool = True
    #: the ``*_summary_us`` summaries
    summary_latencies: bool = False
    quantiles: tuple[tuple[float, float], ...] = DEFAULT_QUANTILES

    @classmethod
    def from_settings(cls, config: Mapping[str, str]) -> ReporterConfig:
        quantiles = config.get("summary_quantiles")
        return cls(
            counter_latencies=config.get("counter_latencies", "true") != "false",
            summary_latencies=config.get("summary_latencies", "false") == "true",
            quantiles=parse_quantiles(quantiles) if quantiles else DEFAULT_QUANTILES,
        )
