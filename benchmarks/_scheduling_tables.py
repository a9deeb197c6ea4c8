"""The markdown tables of ``scheduling.py``: batching on/off, and instance counts per server."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks._harness import TRITON, WORKBENCH, Series, cell, markdown_table, ratio
from benchmarks._scheduling_models import CPU_BURN, MLP_BATCHING, MLP_NO_BATCHING


def _find(series: Sequence[Series], model: str, server: str = WORKBENCH) -> Series:
    found = (s for s in series if s.model == model and s.server == server)
    return next(found, Series(server, model, error="not measured"))


def batching_table(series: Sequence[Series], concurrencies: Sequence[int]) -> str:
    """One row per concurrency: no batching, batching, and batching / no batching."""
    plain, batched = _find(series, MLP_NO_BATCHING), _find(series, MLP_BATCHING)
    header = ["concurrency"]
    for label in ("no batching", "batching"):
        header += [f"{label} infer/s", f"{label} p99 ms", f"{label} avg batch"]
    header += ["batching / none infer/s", "batching / none p99"]
    rows = []
    for c in concurrencies:
        row = [str(c)]
        for m in (plain.at(c), batched.at(c)):
            row += [cell(m.infer_per_s, 0, m.mark), cell(m.p99_ms, 2, m.mark)]
            row.append(cell(m.avg_batch_size, 2))
        off, on = plain.at(c), batched.at(c)
        row += [ratio(on.infer_per_s, off.infer_per_s), ratio(on.p99_ms, off.p99_ms)]
        rows.append(row)
    return markdown_table(header, rows)


def instances_tables(series: Sequence[Series], concurrencies: Sequence[int]) -> tuple[str, str]:
    """(throughput with count 2 / count 1 and workbench / Triton rows, p99 and compute detail)."""
    servers = list(dict.fromkeys(s.server for s in series))
    header = ["server", "instances"] + [f"c={c} infer/s" for c in concurrencies]
    rows: list[list[str]] = []
    for server in servers:
        one, two = (_find(series, CPU_BURN[n], server) for n in (1, 2))
        rows += [_throughput_row(server, "1", one, concurrencies)]
        rows += [_throughput_row(server, "2", two, concurrencies)]
        rows += [[server, "ratio 2 / 1"] + _ratios(two, one, concurrencies)]
    if TRITON in servers and WORKBENCH in servers:
        for count, model in CPU_BURN.items():
            ours, theirs = _find(series, model), _find(series, model, TRITON)
            rows.append(["workbench / Triton", str(count)] + _ratios(ours, theirs, concurrencies))
    return markdown_table(header, rows), _detail_table(series, servers, concurrencies)


def _throughput_row(
    server: str, count: str, series: Series, concurrencies: Sequence[int]
) -> list[str]:
    measured = (series.at(c) for c in concurrencies)
    return [server, count] + [cell(m.infer_per_s, 0, m.mark) for m in measured]


def _ratios(top: Series, bottom: Series, concurrencies: Sequence[int]) -> list[str]:
    return [ratio(top.at(c).infer_per_s, bottom.at(c).infer_per_s) for c in concurrencies]


def _detail_table(
    series: Sequence[Series], servers: Sequence[str], concurrencies: Sequence[int]
) -> str:
    header = ["server", "instances"]
    for c in concurrencies:
        header += [f"c={c} p99 ms", f"c={c} compute ms"]
    rows = []
    for server in servers:
        for count, model in CPU_BURN.items():
            row = [server, str(count)]
            for c in concurrencies:
                m = _find(series, model, server).at(c)
                row += [cell(m.p99_ms, 2, m.mark), cell(m.avg_compute_ms, 2)]
            rows.append(row)
    return markdown_table(header, rows)
