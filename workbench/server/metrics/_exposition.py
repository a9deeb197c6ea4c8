"""The Prometheus text exposition format (0.0.4), written the way Triton's prometheus-cpp does.

Per family a ``# HELP`` and a ``# TYPE`` line, then its samples; labels in name order, with
``quantile``/``le`` last; numbers in their shortest form (``3``, ``55.5``), ``Nan``, ``+Inf``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = Sequence[tuple[str, str]]


@dataclass(slots=True)
class MetricBlock:
    """One family as it is written: name, help, type and its sample lines."""

    name: str
    help: str
    type: str
    lines: list[str] = field(default_factory=list)
    #: write the HELP/TYPE lines even without samples (custom families do, in Triton)
    always: bool = False

    def add(self, labels: Labels, value: float, suffix: str = "") -> None:
        """A sample ``<name><suffix>{labels} value``."""
        self.lines.append(f"{self.name}{suffix}{format_labels(labels)} {format_value(value)}")

    def add_summary(
        self, labels: Labels, count: int, total: float, quantiles: Iterable[tuple[float, float]]
    ) -> None:
        """A summary series: ``_count``, ``_sum``, then one line per quantile."""
        self.add(labels, count, "_count")
        self.add(labels, total, "_sum")
        for quantile, value in quantiles:
            self.add([*labels, ("quantile", format_value(quantile))], value)

    def add_histogram(
        self,
        labels: Labels,
        count: int,
        total: float,
        buckets: Sequence[float],
        counts: Sequence[int],
    ) -> None:
        """A histogram series: ``_count``, ``_sum``, then cumulative ``_bucket`` lines."""
        self.add(labels, count, "_count")
        self.add(labels, total, "_sum")
        cumulative = 0
        for bound, in_bucket in zip(buckets, counts, strict=True):
            cumulative += in_bucket
            self.add([*labels, ("le", format_value(bound))], cumulative, "_bucket")
        self.add([*labels, ("le", "+Inf")], count, "_bucket")

    def render(self) -> str:
        if not self.lines and not self.always:
            return ""
        head = f"# HELP {self.name} {_escape_help(self.help)}\n# TYPE {self.name} {self.type}\n"
        return head + "".join(line + "\n" for line in self.lines)


def render(blocks: Iterable[MetricBlock]) -> str:
    """The exposition text of ``blocks``, in order."""
    return "".join(block.render() for block in blocks)


def format_value(value: float) -> str:
    """A number as prometheus-cpp writes it: shortest round-trip form, no trailing ``.0``."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def format_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape_label(value)}"' for name, value in labels) + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
