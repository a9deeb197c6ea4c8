"""The stub's own wire path: EXECUTE wires to ``pb_utils`` requests, responses to REPLY wires."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.backends.model_folders import request
from workbench.backends.base import TraceRef
from workbench.backends.python import pb_utils
from workbench.backends.python._model_runner import ModelSpec
from workbench.backends.python._stub_requests import ResponseWriter, failed_wires, read_pb_requests
from workbench.backends.python._wire_messages import (
    read_results,
    write_requests,
)
from workbench.backends.python._wire_shm import (
    IN_PLACE_BYTES,
    BlockWriter,
    Region,
    create_region_fd,
    read_arrays,
)
from workbench.core.trace import TraceLevel, TraceRecord
from workbench.errors import InternalError, NotFoundError

SPEC = ModelSpec("m", False, ("A", "B"), {"A": "INT32", "B": "FP32"})


@pytest.fixture
def region() -> Iterator[Region]:
    fd = create_region_fd()
    yield Region(fd)


def _live(region: Region, block: int) -> bool:
    return bool(region.map[block])


def test_requests_come_out_as_pb_utils_requests(region: Region) -> None:
    x = np.arange(4, dtype=np.float32)
    plain = request({"X": x}, request_id="one")
    sequenced = request({"X": x, "S": np.array([b"a", b""], dtype=np.object_)}, ["B"])
    sequenced.parameters.update(sequence_id=7, sequence_start=True, custom="v")
    block, wires = write_requests(BlockWriter(region), [plain, sequenced], [11, 12], {})

    first, second = read_pb_requests(region, block, wires, SPEC.outputs)

    assert not _live(region, block)  # small inputs are copies: the block is free at once
    assert first.request_id() == "one" and first.requested_output_names() == ["A", "B"]
    assert first.parameters() == "{}" and first.flags() == 0 and first.correlation_id() == 0
    assert pb_utils.get_input_tensor_by_name(first, "X").as_numpy().tolist() == x.tolist()
    assert second.requested_output_names() == ["B"]
    assert second.correlation_id() == 7
    assert second.flags() == pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    assert second.parameters() == '{"custom": "v"}'
    strings = pb_utils.get_input_tensor_by_name(second, "S")
    assert strings.triton_dtype() == 13 and strings.as_numpy().tolist() == [b"a", b""]
    assert first.trace()._trace is None and second.trace()._trace is None  # untraced


@pytest.mark.parametrize("parameters", [{}, {"custom": "v"}])
def test_a_traced_requests_trace_id_reaches_the_stub_and_its_table(
    region: Region, parameters: dict[str, str]
) -> None:
    x = np.arange(2, dtype=np.float32)
    traced, untraced = request({"X": x}, **parameters), request({"X": x}, **parameters)
    traced.trace = TraceRecord(_Discard(), TraceLevel.TIMESTAMPS, itertools.count(5)).new_trace()
    table: dict[int, Any] = {}
    block, wires = write_requests(BlockWriter(region), [traced, untraced], [1, 2], table)

    first, second = read_pb_requests(region, block, wires, SPEC.outputs)

    assert table == {5: traced.trace}
    assert first.trace()._trace == TraceRef(5) and second.trace()._trace is None
    bls = pb_utils.InferenceRequest(model_name="m", trace=first.trace())
    assert bls._trace == TraceRef(5)
    assert pb_utils.InferenceRequest(model_name="m")._trace is None
    [alone] = read_pb_requests(region, *write_requests(BlockWriter(region), [traced], [3], {}), [])
    assert alone.trace()._trace == TraceRef(5) and alone.trace().get_context() is None


def test_an_opentelemetry_context_reaches_the_model_with_its_trace(region: Region) -> None:
    # In the opentelemetry mode a traced request's context crosses with its id, for the
    # model's request.trace().get_context() (the triton mode's is None: above).
    context = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    traced = request({"X": np.arange(2, dtype=np.float32)})
    traced.trace = _WithContext(7, context)
    [model_request] = read_pb_requests(
        region, *write_requests(BlockWriter(region), [traced], [1], {}), []
    )
    assert model_request.trace()._trace == TraceRef(7, context)
    assert model_request.trace().get_context() == context


class _WithContext:
    """A traced request's trace in the opentelemetry mode, as a backend sees it."""

    def __init__(self, trace_id: int, context: str) -> None:
        self.id, self._context = trace_id, context

    def get_context(self) -> str:
        return self._context


class _Discard:
    def write_trace(self, text: str) -> None:
        pass


def test_big_inputs_keep_their_block_until_released(region: Region) -> None:
    big = np.ones(IN_PLACE_BYTES // 4 + 1, dtype=np.float32)
    block, wires = write_requests(BlockWriter(region), [request({"X": big})], [1], {})
    [array] = read_arrays(region, block, wires[0][4])
    assert _live(region, block) and array.sum() == big.size
    del array
    gc.collect()
    assert not _live(region, block)


def _round_trip(
    region: Region, responses: list[Any], requested: list[list[str] | None]
) -> list[Any]:
    wires = [(i, "", names, {}, [], 0) for i, names in enumerate(requested)]
    block, results = ResponseWriter(SPEC).write(BlockWriter(region), responses, wires)
    return read_results(region, block, results)


def test_one_response_goes_with_its_declared_types(region: Region) -> None:
    x = np.array([1.5, 2.5])  # float64: converted to the declared FP32 and INT32
    response = pb_utils.InferenceResponse(
        [pb_utils.Tensor("A", x), pb_utils.Tensor("B", x.astype(np.float32))],
        parameters={"p": 1},
    )
    [result] = _round_trip(region, [response], [None])
    a, b = result.outputs
    assert (a.name, a.datatype, a.array.dtype) == ("A", "INT32", np.int32)
    assert (b.name, b.datatype, b.array.tolist()) == ("B", "FP32", [1.5, 2.5])
    assert result.parameters == {"p": 1} and result.error is None


def test_several_responses_errors_and_requested_outputs(region: Region) -> None:
    a = pb_utils.Tensor("A", np.array([1], np.int32))
    b = pb_utils.Tensor("B", np.array([2.0], np.float32))
    responses = [
        pb_utils.InferenceResponse([a, b]),
        pb_utils.InferenceResponse(
            error=pb_utils.TritonError("gone", pb_utils.TritonError.NOT_FOUND)
        ),
        "not a response",
        pb_utils.InferenceResponse([a, b]),
    ]
    ok, error, wrong, only_b = _round_trip(region, responses, [None, None, None, ["B"]])
    assert [t.name for t in ok.outputs] == ["A", "B"]
    assert isinstance(error.error, NotFoundError) and error.error_is_response
    assert isinstance(wrong.error, InternalError) and not wrong.error_is_response
    assert "found type 'str'" in wrong.error.message
    assert [t.name for t in only_b.outputs] == ["B"]
    assert only_b.outputs[0].array.tolist() == [2.0]


def test_failed_wires_fail_every_request() -> None:
    wires = failed_wires(2, InternalError("boom"))
    assert wires == [(("InternalError", "boom"), [], {}, False)] * 2
