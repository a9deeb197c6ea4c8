"""Triton trace files as pandas: one row per trace, the spans of each, where the time goes.

Reads the JSON trace files of ``--trace-config triton,file=<path>`` (the format of Triton's
``docs/user_guide/trace.md``), as real tritonserver writes them and as the embedded server
does: a JSON array of ``{"id", "model_name", "model_version", ["request_id"], ["parent_id"]}``
headers, ``{"id", "timestamps": [{"name", "ns"}]}`` entries and, at level TENSORS,
``{"id", "activity", "tensor"}`` entries. A file the server is still writing (``<file>`` itself
lacks its closing ``]`` until the server stops) is read as far as it is complete.

Spans follow Triton's ``qa/common/trace_summary.py``: queue is QUEUE_START to COMPUTE_START
(it includes waiting for a dynamic batch to form), compute is COMPUTE_START to COMPUTE_END in
three parts (input, infer, output), the request ("handler") is REQUEST_START to REQUEST_END
and its overhead what queue and compute leave of it; HTTP adds receive and send. An
ensemble's own trace has no compute: its steps are traces of their own, with ``parent_id``.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench._types import StrPath
from workbench.errors import InvalidArgumentError, MissingDependencyError

#: Triton's timestamp names, in the order they happen for one request
TIMESTAMPS = (
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "GRPC_WAITREAD_START",
    "GRPC_WAITREAD_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "INFER_RESPONSE_COMPLETE",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
    "GRPC_SEND_START",
    "GRPC_SEND_END",
)
#: span -> (from, to) timestamp; a trace has the spans whose two timestamps it has
SPANS = {
    "receive": ("HTTP_RECV_START", "HTTP_RECV_END"),
    "request": ("REQUEST_START", "REQUEST_END"),
    "queue": ("QUEUE_START", "COMPUTE_START"),
    "compute_input": ("COMPUTE_START", "COMPUTE_INPUT_END"),
    "compute_infer": ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    "compute_output": ("COMPUTE_OUTPUT_START", "COMPUTE_END"),
    "send": ("HTTP_SEND_START", "HTTP_SEND_END"),
    "grpc_send": ("GRPC_SEND_START", "GRPC_SEND_END"),
}
TRACE_COLUMNS = ("id", "parent_id", "model_name", "model_version", "request_id", "protocol")
SPAN_COLUMNS = (
    "id", "parent_id", "root_id", "model_name", "request_id", "span", "start_us", "end_us",
    "duration_us",
)  # fmt: skip
#: the per-model averages ``summarize`` reports, microseconds per request
SUMMARY_SPANS = ("request", "queue", "compute_input", "compute_infer", "compute_output")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise MissingDependencyError("pandas", "notebook") from None
    return pandas


# -- files -------------------------------------------------------------------------------------
def trace_files(path: StrPath) -> list[Path]:
    """``path`` (when it exists) and its indexed files ``<path>.0``, ``<path>.1``, ... in
    index order: everything one ``file`` setting wrote."""
    base = Path(path)
    indexed = []
    for candidate in base.parent.glob(f"{glob.escape(base.name)}.*"):
        suffix = candidate.name[len(base.name) + 1 :]
        if suffix.isdigit():  # not the ".partial" of a file being written
            indexed.append((int(suffix), candidate))
    found = [base] if base.is_file() else []
    return found + [candidate for _, candidate in sorted(indexed)]


def read_trace_file(path: StrPath) -> list[dict[str, Any]]:
    """The entries of one trace file, also while the server still writes it."""
    text = Path(path).read_text(encoding="utf-8", errors="replace").strip()
    if not text:
        return []
    if not text.startswith("["):
        raise InvalidArgumentError(f"'{path}' is not a Triton trace file (a JSON array)")
    try:
        entries = json.loads(text if text.endswith("]") else f"{text}]")
    except json.JSONDecodeError:
        entries = _complete_entries(text)
    if not isinstance(entries, list):
        raise InvalidArgumentError(f"'{path}' is not a Triton trace file (a JSON array)")
    return [entry for entry in entries if isinstance(entry, dict)]


def _complete_entries(text: str) -> list[Any]:
    """The whole entries at the start of a file cut short (tritonserver's main trace file is
    flushed as its buffer fills, so mid-run it may end inside an entry)."""
    decoder = json.JSONDecoder()
    entries: list[Any] = []
    position = text.find("[") + 1
    while position > 0:
        while position < len(text) and text[position] in " \n\r\t,":
            position += 1
        try:
            entry, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            break
        entries.append(entry)
    return entries


def read_traces(paths: StrPath | Iterable[StrPath]) -> list[dict[str, Any]]:
    """The entries of several files (or of one file and its indexed files), in file order."""
    if isinstance(paths, str | os.PathLike):
        paths = trace_files(paths) or [Path(paths)]
    entries: list[dict[str, Any]] = []
    for path in paths:
        entries.extend(read_trace_file(path))
    return entries


# -- tables ------------------------------------------------------------------------------------
def trace_rows(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per trace id: its header fields, protocol and timestamps (ns) by name."""
    rows: dict[int, dict[str, Any]] = {}
    for entry in entries:
        if "id" not in entry:
            continue
        row = rows.setdefault(int(entry["id"]), {"id": int(entry["id"]), "parent_id": 0})
        for key in ("model_name", "model_version", "request_id", "parent_id"):
            if key in entry:
                row[key] = entry[key]
        for stamp in entry.get("timestamps", ()):
            _keep(row, str(stamp["name"]), int(stamp["ns"]))
    for row in rows.values():
        row["protocol"] = _protocol(row)
    return sorted(rows.values(), key=lambda row: row["id"])


def _keep(row: dict[str, Any], name: str, ns: int) -> None:
    """One timestamp into its trace's row. A stream repeats some per response (GRPC_SEND_*,
    INFER_RESPONSE_COMPLETE): a row keeps the first start and the last end, so that its span
    covers them all. Triton writes a generate reply's HTTP_SEND_* as 0: those are left out."""
    if ns == 0 and name.startswith("HTTP_SEND"):
        return
    if name in row:
        ns = max(ns, row[name]) if name.endswith(("_END", "_COMPLETE")) else min(ns, row[name])
    row[name] = ns


def _protocol(row: Mapping[str, Any]) -> str:
    if "HTTP_RECV_START" in row or "HTTP_SEND_START" in row:
        return "HTTP"
    if "GRPC_WAITREAD_END" in row or "GRPC_SEND_START" in row:
        return "GRPC"
    return ""  # a spawned trace (ensemble step), or a request from within the server


def traces_frame(entries: Iterable[Mapping[str, Any]]) -> Any:
    """``trace_rows`` as a DataFrame: header columns, then one column per timestamp name
    (nanoseconds; empty where the trace has no such timestamp)."""
    pandas = _pandas()
    rows = trace_rows(entries)
    names = [name for name in TIMESTAMPS if any(name in row for row in rows)]
    extra = sorted({k for row in rows for k in row} - set(TRACE_COLUMNS) - set(TIMESTAMPS))
    frame = pandas.DataFrame(rows, columns=[*TRACE_COLUMNS, *names, *extra])
    for name in [*names, *extra]:
        frame[name] = frame[name].astype("Int64")
    return frame


def span_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each trace's spans, in microseconds from the earliest timestamp of all traces; a
    spawned trace knows the front-end request it belongs to (``root_id``)."""
    parents = {row["id"]: int(row.get("parent_id") or 0) for row in rows}
    stamps = [ns for row in rows for name, ns in row.items() if name in TIMESTAMPS]
    origin = min(stamps, default=0)
    spans = []
    for row in rows:
        for span, (start, end) in SPANS.items():
            if start in row and end in row:
                spans.append(_span(row, span, row[start] - origin, row[end] - origin, parents))
    return spans


def _span(
    row: Mapping[str, Any], span: str, start_ns: int, end_ns: int, parents: Mapping[int, int]
) -> dict[str, Any]:
    root = row["id"]
    while parents.get(root):
        root = parents[root]
    return {
        "id": row["id"],
        "parent_id": int(row.get("parent_id") or 0),
        "root_id": root,
        "model_name": row.get("model_name", ""),
        "request_id": row.get("request_id", ""),
        "span": span,
        "start_us": start_ns / 1000,
        "end_us": end_ns / 1000,
        "duration_us": (end_ns - start_ns) / 1000,
    }


def spans_frame(entries: Iterable[Mapping[str, Any]]) -> Any:
    """``span_rows`` of the traces in ``entries`` as a DataFrame (``SPAN_COLUMNS``)."""
    return _pandas().DataFrame(span_rows(trace_rows(entries)), columns=list(SPAN_COLUMNS))


def summary_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per model and version: traces, average microseconds per request in each part of the
    request (``SUMMARY_SPANS``; an ensemble has only ``request``), the overhead the queue and
    compute leave of the request, and each part's share of the request."""
    groups: dict[tuple[str, Any], list[Mapping[str, Any]]] = {}
    for row in rows:
        if "REQUEST_START" in row and "REQUEST_END" in row:
            groups.setdefault((row.get("model_name", ""), row.get("model_version")), []).append(row)
    return [_summary(name, version, group) for (name, version), group in groups.items()]


def _summary(name: str, version: Any, group: list[Mapping[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"model_name": name, "model_version": version, "traces": len(group)}
    for span in SUMMARY_SPANS:
        start, end = SPANS[span]
        durations = [row[end] - row[start] for row in group if start in row and end in row]
        summary[f"{span}_us"] = _mean_us(durations)
    parts = [summary[f"{span}_us"] for span in SUMMARY_SPANS[1:]]
    request = summary["request_us"]
    known = [part for part in parts if part is not None]
    summary["overhead_us"] = round(request - sum(known), 1) if known else None
    for span in (*SUMMARY_SPANS[1:], "overhead"):
        part = summary[f"{span}_us"]
        share = part / request if part is not None and request else None
        summary[f"{span}_share"] = None if share is None else round(share, 3)
    return summary


def _mean_us(durations_ns: list[int]) -> float | None:
    return round(sum(durations_ns) / len(durations_ns) / 1000, 1) if durations_ns else None


def summarize(entries: Iterable[Mapping[str, Any]]) -> Any:
    """``summary_rows`` of the traces in ``entries`` as a DataFrame, one row per model."""
    return _pandas().DataFrame(summary_rows(trace_rows(entries)))


__all__ = [
    "SPANS",
    "SPAN_COLUMNS",
    "SUMMARY_SPANS",
    "TIMESTAMPS",
    "TRACE_COLUMNS",
    "read_trace_file",
    "read_traces",
    "span_rows",
    "spans_frame",
    "summarize",
    "summary_rows",
    "trace_files",
    "trace_rows",
    "traces_frame",
]
