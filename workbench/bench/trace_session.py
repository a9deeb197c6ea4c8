"""Trace N requests to one model through Triton's trace extension, on any Triton server.

Everything goes through ``tritonclient.http`` (the trace extension and inference), so a
recording works the same on real tritonserver and on the embedded server:

1. the server's trace file (``GET /v2/trace/setting``); a server started without one cannot
   trace (``--trace-config triton,file=<path>``), and the file must be readable here;
2. the model's setting: level TIMESTAMPS, every request (rate 1), ``count`` and
   ``log_frequency`` both N, so the server writes exactly the N traces to the next indexed
   file ``<file>.<i>`` as soon as the N-th is done (``core/trace_settings.py`` says why);
3. N requests, one at a time, with inputs made up from the model's metadata (or given);
4. the new indexed files, read once they hold N traces;
5. the model's setting cleared again (its fields set to ``null``): the model then follows the
   global setting, as before, unless it had a setting of its own, which is not restored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.bench.synthetic_inputs import synthesize_inputs
from workbench.bench.trace import read_traces, trace_files, trace_rows
from workbench.errors import InvalidArgumentError, UnavailableError

#: how long the server may take to write the traces once the last reply is in
WRITE_TIMEOUT_S = 30.0
_CLEARED = {"trace_level": None, "trace_rate": None, "trace_count": None, "log_frequency": None}


@dataclass
class TraceRecording:
    """What ``record_trace`` collected: the files it read and their entries."""

    model: str
    requests: int
    files: list[Path] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)


def record_trace(
    http_address: str,
    model: str,
    requests: int = 10,
    *,
    inputs: Mapping[str, Any] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    timeout_s: float = WRITE_TIMEOUT_S,
) -> TraceRecording:
    """Trace ``requests`` inferences of ``model`` on the server at ``http_address``."""
    import tritonclient.http as httpclient

    if requests < 1:
        raise InvalidArgumentError(f"requests must be at least 1, got {requests}")
    client = httpclient.InferenceServerClient(url=http_address)
    try:
        base = _trace_file(client.get_trace_settings())
        before = set(trace_files(base))
        client.update_trace_settings(model_name=model, settings=_settings(requests))
        try:
            _send(client, model, requests, inputs, shapes)
            files = _wait_for_traces(base, before, requests, timeout_s)
        finally:
            client.update_trace_settings(model_name=model, settings=_CLEARED)
    finally:
        client.close()
    return TraceRecording(model, requests, files, read_traces(files))


def _trace_file(settings: Mapping[str, Any]) -> Path:
    name = settings.get("trace_file") or ""
    if settings.get("trace_mode", "triton") != "triton" or not name:
        raise UnavailableError(
            "the server writes no trace file: start it with --trace-config "
            "triton,file=<path> (Server(..., trace_config=['triton,file=<path>']))"
        )
    path = Path(name)
    if not path.parent.is_dir():
        raise UnavailableError(
            f"the server writes its traces to '{name}', which is not on this machine"
        )
    return path


def _settings(requests: int) -> dict[str, Any]:
    return {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "1",
        "trace_count": str(requests),
        "log_frequency": str(requests),
    }


def _send(
    client: Any,
    model: str,
    requests: int,
    inputs: Mapping[str, Any] | None,
    shapes: Mapping[str, Sequence[int]] | None,
) -> None:
    import tritonclient.http as httpclient

    metadata = client.get_model_metadata(model)
    config = client.get_model_config(model)
    arrays = synthesize_inputs(
        metadata, max_batch_size=int(config.get("max_batch_size", 0)), inputs=inputs, shapes=shapes
    )
    datatypes = {spec["name"]: spec["datatype"] for spec in metadata["inputs"]}
    for index in range(requests):
        tensors = []
        for name, array in arrays.items():
            tensor = httpclient.InferInput(name, list(array.shape), datatypes[name])
            tensor.set_data_from_numpy(array, binary_data=True)
            tensors.append(tensor)
        client.infer(model, tensors, request_id=f"trace-{index}")


def _wait_for_traces(base: Path, before: set[Path], requests: int, timeout_s: float) -> list[Path]:
    """The indexed files written since ``before``, once they hold ``requests`` traces."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = [path for path in trace_files(base) if path not in before and path != base]
        traced = sum(1 for row in trace_rows(read_traces(files)) if not row.get("parent_id"))
        if traced >= requests:
            return files
        if time.monotonic() > deadline:
            raise UnavailableError(
                f"the server wrote {traced} of {requests} traces to '{base}.<n>' within "
                f"{timeout_s:.0f} s"
            )
        time.sleep(0.05)


__all__ = ["WRITE_TIMEOUT_S", "TraceRecording", "record_trace"]
