"""One sampled request's trace, in Triton's JSON trace format.

Mirrors Triton 2.51's ``src/tracer.cc``: an ``InferenceTrace`` is one trace id (Triton's
``TRITONSERVER_InferenceTrace``), a request of the front end or a request it spawned (an
ensemble step, with ``parent_id``); a ``TraceRecord`` (Triton's ``TraceManager::Trace``) holds
the entries of every id the front-end request led to and hands them to its setting as one
trace once the request has been answered (``release``). Entries are the objects Triton writes:

- ``{"id", "model_name", "model_version", ["request_id"], ["parent_id"]}`` with REQUEST_START;
- ``{"id", "timestamps": [{"name", "ns"}]}``, one per timestamp (``CLOCK_MONOTONIC`` ns, as
  Triton's ``steady_clock``);
- ``{"id", "activity", "tensor": {"name", "data", "shape", "dtype"}}`` at level TENSORS.

The core reports a request's timestamps from the ``RequestTimes`` its statistics already keep,
once the request is done; nothing here runs for a request that is not traced. What a trace
reports goes to its record (a ``TraceRecorder``): ``TraceRecord`` here writes Triton's JSON
(``triton`` mode); ``trace_otel.SpanRecord`` builds OpenTelemetry spans (``opentelemetry``).
"""

from __future__ import annotations

import enum
import json
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Protocol

import numpy as np

from workbench._types import Tensor
from workbench.core.statistics import RequestTimes


class TraceLevel(enum.IntFlag):
    """``TRITONSERVER_InferenceTraceLevel`` (its values: OFF is ``DISABLED``)."""

    OFF = 0
    TIMESTAMPS = 0x4
    TENSORS = 0x8

    def names(self) -> list[str]:
        """The levels as the trace extension lists them (``["OFF"]`` when disabled)."""
        if not self:
            return ["OFF"]
        return [name for name in ("TIMESTAMPS", "TENSORS") if TraceLevel[name] & self]


class TraceSink(Protocol):
    """Where a finished trace goes: the setting it was sampled under (``trace_settings``)."""

    def write_trace(self, text: str) -> None: ...


class TraceRecorder(Protocol):
    """What the traces of one front-end request report to (Triton's ``TraceManager::Trace``
    with its callbacks): a front end's timestamps (``CaptureTimestamp``), the core's activities
    (``TraceActivity``: the model header comes with REQUEST_START), tensors
    (``TraceTensorActivity``), and the release once the request is answered (``RecordLifetime``:
    written then, or once the BLS calls it spawned have ended)."""

    level: TraceLevel

    def new_trace(self, parent_id: int = 0) -> InferenceTrace: ...

    def timestamp(self, trace_id: int, name: str, ns: int) -> None: ...

    def activity(self, trace_id: int, name: str, ns: int) -> None: ...

    def model(self, trace: InferenceTrace, model: str, version: int, request_id: str) -> None: ...

    def tensor(self, trace_id: int, activity: str, tensor: Tensor) -> None: ...

    def context(self, trace_id: int) -> str | None: ...

    def release(self) -> None: ...

    def hold(self) -> None: ...

    def let_go(self) -> None: ...


class RecordLifetime:
    """When the traces of one front-end request are written: once the request has been
    answered (``release``) and no request it spawned still holds them (``hold``/``let_go``).

    Triton writes in ``TraceManager::Trace::~Trace`` (``src/tracer.cc``), once the last trace
    sharing its ``std::shared_ptr`` (the request's, its spawned children's) is released: a BLS
    call's request may end after its caller answered, as a decoupled model's that returns from
    ``execute`` after its final flag, and its trace is still in the file (observed)."""

    def __init__(self) -> None:
        self.released = False
        #: spawned requests not yet ended
        self._holds = 0
        self._written = False
        # BLS calls hold and let go on their worker threads, the answer releases on the loop
        self._lock = threading.Lock()

    def hold(self) -> None:
        """A spawned request (a BLS call) runs: the record waits for its ``let_go``."""
        with self._lock:
            self._holds += 1

    def let_go(self) -> None:
        """A request that ``hold`` waited for has ended."""
        with self._lock:
            self._holds -= 1
        self._write_when_done()

    def release(self) -> None:
        """The front-end request has been answered (once; again does nothing)."""
        with self._lock:
            self.released = True
        self._write_when_done()

    def _write_when_done(self) -> None:
        with self._lock:
            due = self.released and not self._holds and not self._written
            self._written = self._written or due
        if due:
            self._write()

    def _write(self) -> None:
        raise NotImplementedError


def _entry(value: dict[str, object]) -> str:
    return json.dumps(value, separators=(",", ":"))


class TraceRecord(RecordLifetime):
    """The traces of one front-end request and of the requests it spawned, written together."""

    def __init__(self, sink: TraceSink, level: TraceLevel, ids: Iterator[int]) -> None:
        super().__init__()
        self.sink = sink
        self.level = level
        self._ids = ids
        #: trace id -> its entries (JSON texts), in the order they were reported
        self.streams: dict[int, list[str]] = {}

    def new_trace(self, parent_id: int = 0) -> InferenceTrace:
        return InferenceTrace(self, next(self._ids), parent_id)

    def add(self, trace_id: int, entry: str) -> None:
        self.streams.setdefault(trace_id, []).append(entry)

    def timestamp(self, trace_id: int, name: str, ns: int) -> None:
        self.add(trace_id, _entry({"id": trace_id, "timestamps": [{"name": name, "ns": ns}]}))

    activity = timestamp  # the JSON file does not tell a front end's from the core's

    def context(self, trace_id: int) -> str | None:
        """No OpenTelemetry context in this mode (Triton's ``get_context`` gives None)."""
        return None

    def model(self, trace: InferenceTrace, model: str, version: int, request_id: str) -> None:
        header: dict[str, object] = {"id": trace.id, "model_name": model, "model_version": version}
        if request_id:
            header["request_id"] = request_id
        if trace.parent_id:
            header["parent_id"] = trace.parent_id
        self.add(trace.id, _entry(header))

    def tensor(self, trace_id: int, activity: str, tensor: Tensor) -> None:
        entry = {"id": trace_id, "activity": activity, "tensor": tensor_json(tensor)}
        self.add(trace_id, _entry(entry))

    def _write(self) -> None:
        """Hand the entries to the setting: Triton does it when the request is freed.

        Triton keeps the ids in a ``std::unordered_map`` and writes them in its iteration order,
        which for the few consecutive ids of one request is the reverse of their creation
        (ensemble steps and BLS calls first, the request itself last). Ids are created in that
        order; the order entries were reported in is not it (the gRPC front end reports its
        timestamps once the request is answered, after its children's)."""
        streams = [",".join(self.streams[i]) for i in sorted(self.streams, reverse=True)]
        if streams:
            self.sink.write_trace(",".join(streams))


class InferenceTrace:
    """One trace id: what ``InferRequest.trace`` holds for a traced request."""

    __slots__ = ("id", "parent_id", "record", "reported", "started_ns")

    def __init__(self, record: TraceRecorder, trace_id: int, parent_id: int = 0) -> None:
        self.record = record
        self.id = trace_id
        self.parent_id = parent_id
        #: REQUEST_START: when the core was handed the request (a front end sets it when it
        #: does; a spawned request's is its creation)
        self.started_ns = time.monotonic_ns()
        #: the core reported the request (it reached a model, failed there or not)
        self.reported = False

    @property
    def timestamps(self) -> bool:
        return bool(self.record.level & TraceLevel.TIMESTAMPS)

    @property
    def tensors(self) -> bool:
        return bool(self.record.level & TraceLevel.TENSORS)

    def spawn(self, *, hold: bool = False) -> InferenceTrace:
        """A child trace (an ensemble step's request, a BLS call's), written with this trace;
        with ``hold``, not before the child's ``let_go`` (a request that may outlive this
        one's answer)."""
        if hold:
            self.record.hold()
        return self.record.new_trace(self.id)

    def let_go(self) -> None:
        """The request of a child spawned with ``hold`` has ended."""
        self.record.let_go()

    def get_context(self) -> str | None:
        """The OpenTelemetry context a model hands on (Triton's ``InferenceTrace.get_context``):
        ``{"traceparent":"00-<trace>-<this request's model span>-01"}`` in the opentelemetry
        mode, None in the triton mode."""
        return self.record.context(self.id)

    def start(self) -> None:
        """The front end hands the request to the core now (REQUEST_START)."""
        self.started_ns = time.monotonic_ns()

    def capture(self, name: str, ns: int) -> None:
        """One timestamp (a front end's: HTTP_RECV_START, GRPC_SEND_END, ...)."""
        if self.timestamps:
            self.record.timestamp(self.id, name, ns)

    def _activity(self, name: str, ns: int) -> None:
        if self.timestamps:
            self.record.activity(self.id, name, ns)

    def report_request(
        self,
        model: str,
        version: int,
        request_id: str,
        times: RequestTimes,
        *,
        compute: bool = True,
        inputs: Iterable[Tensor] = (),
        outputs: Iterable[Tensor] = (),
    ) -> None:
        """The core's part, once the request is done (REQUEST_END is now), in the order
        Triton's file shows it: the model header, REQUEST_START, QUEUE_START, the inputs and
        outputs (level TENSORS), the COMPUTE_* timestamps of the execution the request was
        part of (``compute=False`` for an ensemble, which has none; none either when it did
        not execute) and REQUEST_END."""
        ended_ns = time.monotonic_ns()
        self.reported = True
        if self.timestamps:
            self.record.model(self, model, version, request_id)
            self._activity("REQUEST_START", self.started_ns)
            self._activity("QUEUE_START", times.received)
        if self.tensors:
            self._report_tensors("TENSOR_QUEUE_INPUT", inputs)
            self._report_tensors("TENSOR_BACKEND_OUTPUT", outputs)
        if compute and times.started:
            for name, ns in _compute_timestamps(times):
                self._activity(name, ns)
        self._activity("REQUEST_END", ended_ns)

    def _report_tensors(self, activity: str, tensors: Iterable[Tensor]) -> None:
        for tensor in tensors:
            self.record.tensor(self.id, activity, tensor)

    def release(self) -> None:
        self.record.release()


def _compute_timestamps(times: RequestTimes) -> Iterator[tuple[str, int]]:
    """The statistics' phase times under Triton's names (``_Phases`` in ``core/model.py``)."""
    yield "COMPUTE_START", times.started
    yield "COMPUTE_INPUT_END", times.input_done
    yield "COMPUTE_OUTPUT_START", times.infer_done
    yield "COMPUTE_END", times.output_done


# -- TENSORS: values as Triton's ``TraceTensorActivity`` prints them ------------------------------
def tensor_json(tensor: Tensor) -> dict[str, str]:
    """``{"name", "data", "shape", "dtype"}`` with ``data`` printed as C++ streams print it."""
    array = tensor.array
    return {
        "name": tensor.name,
        "data": ",".join(_elements(tensor.datatype, array.reshape(-1))),
        "shape": ",".join(str(d) for d in array.shape),
        "dtype": tensor.datatype,
    }


def _elements(datatype: str, flat: np.ndarray) -> Iterator[str]:
    """Each element as ``operator<<`` writes it: floats like ``%g``; INT8/UINT8 as characters
    (they are ``char`` types); BOOL as 0/1; BYTES in quotes; FP16/BF16 not at all."""
    if datatype in ("FP16", "BF16"):
        return
    for value in flat.tolist():
        if datatype in ("FP32", "FP64"):
            yield f"{value:g}"
        elif datatype in ("INT8", "UINT8"):
            yield chr(value % 256)
        elif datatype == "BOOL":
            yield "1" if value else "0"
        elif datatype == "BYTES":
            text = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
            yield f'"{text}"'
        else:
            yield str(value)


__all__ = [
    "InferenceTrace",
    "RecordLifetime",
    "TraceLevel",
    "TraceRecord",
    "TraceRecorder",
    "TraceSink",
    "tensor_json",
]
