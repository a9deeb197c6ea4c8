"""One request's trace entries, written as Triton's ``TraceManager`` writes them."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from workbench._types import Tensor
from workbench.core.statistics import RequestTimes
from workbench.core.trace import TraceLevel, TraceRecord, tensor_json


class Sink:
    def __init__(self) -> None:
        self.written: list[list[dict[str, object]]] = []

    def write_trace(self, text: str) -> None:
        self.written.append(json.loads(f"[{text}]"))


def times() -> RequestTimes:
    return RequestTimes(received=20, started=30, input_done=40, infer_done=50, output_done=60)


def record(level: TraceLevel = TraceLevel.TIMESTAMPS) -> tuple[Sink, TraceRecord]:
    sink = Sink()
    return sink, TraceRecord(sink, level, itertools.count(1))


def stamps(entries: list[dict[str, object]], trace_id: int) -> list[str]:
    return [
        e["timestamps"][0]["name"]  # type: ignore[index]
        for e in entries
        if e["id"] == trace_id and "timestamps" in e
    ]


def test_a_request_is_written_with_its_header_and_the_statistics_timestamps() -> None:
    sink, traces = record()
    trace = traces.new_trace()
    trace.started_ns = 10
    trace.report_request("m", 1, "r1", times())
    trace.release()
    (entries,) = sink.written
    assert entries[0] == {"id": 1, "model_name": "m", "model_version": 1, "request_id": "r1"}
    assert [(e["timestamps"][0]["name"], e["timestamps"][0]["ns"]) for e in entries[1:6]] == [  # type: ignore[index]
        ("REQUEST_START", 10),
        ("QUEUE_START", 20),
        ("COMPUTE_START", 30),
        ("COMPUTE_INPUT_END", 40),
        ("COMPUTE_OUTPUT_START", 50),
    ]
    assert stamps(entries, 1)[-1] == "REQUEST_END"


def test_a_request_that_never_executed_has_no_compute_timestamps() -> None:
    sink, traces = record()
    trace = traces.new_trace()
    trace.report_request("m", 1, "", RequestTimes())
    trace.release()
    (entries,) = sink.written
    assert "request_id" not in entries[0]
    assert stamps(entries, 1) == ["REQUEST_START", "QUEUE_START", "REQUEST_END"]


def test_ensemble_steps_are_children_written_before_their_parent_once() -> None:
    sink, traces = record()
    parent = traces.new_trace()
    parent.capture("HTTP_RECV_START", 1)
    steps = [parent.spawn(), parent.spawn()]
    for step in steps:
        step.report_request("step", 1, "e", times())
    parent.report_request("ens", 1, "e", times(), compute=False)
    parent.release()
    parent.release()  # a second release writes nothing more
    (entries,) = sink.written
    headers = [e for e in entries if "model_name" in e]
    assert [(h["id"], h.get("parent_id")) for h in headers] == [(3, 1), (2, 1), (1, None)]
    assert "COMPUTE_START" not in stamps(entries, 1)


def test_children_come_first_even_when_their_parent_reported_nothing_before_them() -> None:
    """A gRPC request's own timestamps are reported once it is answered, after a BLS call's."""
    sink, traces = record()
    parent = traces.new_trace()
    child = parent.spawn()
    child.report_request("add_one", 1, "", times())
    parent.report_request("bls", 1, "r", times())
    parent.capture("GRPC_WAITREAD_START", 1)
    parent.release()
    (entries,) = sink.written
    assert [e["id"] for e in entries] == [2] * 8 + [1] * 9


def test_a_held_child_that_ends_after_its_parent_is_answered_is_written_with_it() -> None:
    """A decoupled BLS call may end after its caller answered: Triton writes the trace when
    the last of its requests is freed, so the caller's waits for the call's."""
    sink, traces = record()
    parent = traces.new_trace()
    child, done = parent.spawn(hold=True), parent.spawn(hold=True)
    done.report_request("add_one", 1, "", times())
    done.let_go()
    parent.report_request("bls", 1, "", times())
    parent.release()
    assert sink.written == []  # ``child`` still runs
    child.report_request("repeat", 1, "c", times())
    child.let_go()
    (entries,) = sink.written
    assert [e["id"] for e in entries if "model_name" in e] == [3, 2, 1]
    parent.release()
    assert len(sink.written) == 1  # written once


def test_level_tensors_alone_writes_tensors_but_no_timestamps() -> None:
    sink, traces = record(TraceLevel.TENSORS)
    trace = traces.new_trace()
    tensor = Tensor("IN", "FP32", np.array([[1.5, 2.0]], dtype=np.float32))
    trace.report_request("m", 1, "r", times(), inputs=[tensor], outputs=[tensor])
    trace.release()
    (entries,) = sink.written
    assert [e["activity"] for e in entries] == ["TENSOR_QUEUE_INPUT", "TENSOR_BACKEND_OUTPUT"]


@pytest.mark.parametrize(
    ("datatype", "values", "data"),
    [
        ("FP32", [0.5, 1e-07, 3.14159265, 1234567.0], "0.5,1e-07,3.14159,1.23457e+06"),
        ("INT32", [-3, 7], "-3,7"),
        ("BOOL", [True, False], "1,0"),
        ("UINT8", [65, 66], "A,B"),  # a char type: C++ streams print characters
        ("BYTES", [b"ab", b"c"], '"ab","c"'),
        ("FP16", [1.5, 2.0], ""),  # Triton prints nothing for FP16 and BF16
    ],
)
def test_tensor_values_are_printed_as_cpp_streams_print_them(
    datatype: str, values: list[object], data: str
) -> None:
    dtype = {"FP32": np.float32, "INT32": np.int32, "BOOL": np.bool_, "UINT8": np.uint8,
             "BYTES": np.object_, "FP16": np.float16}[datatype]  # fmt: skip
    tensor = Tensor("T", datatype, np.array([values], dtype=dtype))
    assert tensor_json(tensor) == {
        "name": "T",
        "data": data,
        "shape": f"1,{len(values)}",
        "dtype": datatype,
    }


def test_levels_are_named_as_the_trace_extension_lists_them() -> None:
    assert TraceLevel.OFF.names() == ["OFF"]
    assert (TraceLevel.TIMESTAMPS | TraceLevel.TENSORS).names() == ["TIMESTAMPS", "TENSORS"]
