"""The stub's side of an ``EXECUTE``: wire requests to ``pb_utils`` requests, and the model's
responses straight back to wire results.

The server goes through core ``ExecRequest``/``ExecResult`` objects (``_wire_messages``); in the
stub nothing else needs them, so every call would build and convert one more layer of objects
per request, tensor and response. Decoupled models still go through them: their responses
leave one at a time, through each request's ``respond``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench._types import Parameters
from workbench.backends.python import pb_utils
from workbench.backends.python._model_bridge import failed_result, output_part, pb_request
from workbench.backends.python._model_runner import ModelSpec
from workbench.backends.python._wire_messages import (
    ErrorWire,
    RequestWire,
    ResultWire,
    error_to_wire,
    trace_ref,
)
from workbench.backends.python._wire_shm import BlockWriter, Part, Region, TensorDesc, read_arrays
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.errors import WorkbenchError

#: ``TRITONSERVER_TYPE_BF16``
_BF16 = 14


def read_pb_requests(
    region: Region, block: int, wires: list[RequestWire], all_outputs: Sequence[str]
) -> list[pb_utils.InferenceRequest]:
    """The ``pb_utils`` requests of an ``EXECUTE`` (``read_arrays``: when the block is freed)."""
    if len(wires) == 1:  # the common case, without the splitting
        _, request_id, requested, parameters, descs, trace_id = wires[0]
        inputs = _tensors(descs, read_arrays(region, block, descs))
        trace = trace_ref(trace_id)
        return [pb_request(request_id, inputs, requested, parameters, all_outputs, trace)]
    arrays = read_arrays(region, block, [desc for wire in wires for desc in wire[4]])
    requests, start = [], 0
    for _, request_id, requested, parameters, descs, trace_id in wires:
        end = start + len(descs)
        inputs = _tensors(descs, arrays[start:end])
        trace = trace_ref(trace_id)
        requests.append(pb_request(request_id, inputs, requested, parameters, all_outputs, trace))
        start = end
    return requests


def _tensors(descs: list[TensorDesc], arrays: list[Any]) -> list[pb_utils.Tensor]:
    from_wire = pb_utils.Tensor._from_wire
    return [from_wire(desc[0], desc[1], array) for desc, array in zip(descs, arrays)]  # noqa: B905


def failed_wires(count: int, error: WorkbenchError) -> list[ResultWire]:
    """The results of ``count`` requests that ``error`` failed together."""
    return [(error_to_wire(error), [], {}, False)] * count


class ResponseWriter:
    """Writes a model's responses into one block, its output types looked up once per model."""

    def __init__(self, spec: ModelSpec) -> None:
        self._model = spec.name
        self._declared = spec.declared
        #: output -> (declared numeric type, its numpy dtype): an array already of that dtype
        #: goes as it is (the usual case)
        self._plain = {
            name: (wire, WIRE_TO_NUMPY[wire])
            for name, wire in spec.declared.items()
            if wire in WIRE_TO_NUMPY and wire not in ("BYTES", "BF16")
        }

    def write(
        self, writer: BlockWriter, responses: list[Any], wires: list[RequestWire]
    ) -> tuple[int, list[ResultWire]]:
        """The block holding every output and each response's result, in request order."""
        if len(responses) == 1:  # the usual case, without the splitting
            response = responses[0]
            if type(response) is pb_utils.InferenceResponse and response._error is None:
                block, descs = writer.write_parts(self._parts(response, wires[0][2]))
                return block, [(None, descs, response._parameters, False)]
        parts: list[Part] = []
        #: per response: (error, how many outputs, parameters, whether the error is the response)
        heads: list[tuple[ErrorWire, int, Parameters, bool]] = []
        for response, wire in zip(responses, wires, strict=True):
            failed = failed_result(response, self._model)
            if failed is not None:
                heads.append((error_to_wire(failed.error), 0, {}, failed.error_is_response))
                continue
            outputs = self._parts(response, wire[2])
            parts += outputs
            heads.append((None, len(outputs), response._parameters, False))
        block, descs = writer.write_parts(parts)
        results: list[ResultWire] = []
        start = 0
        for error, count, parameters, is_response in heads:
            results.append((error, descs[start : start + count], parameters, is_response))
            start += count
        return block, results

    def _parts(
        self, response: pb_utils.InferenceResponse, requested: list[str] | None
    ) -> list[Part]:
        """The outputs of ``response`` that were asked for (``requested`` None: every one)."""
        plain = self._plain
        parts = []
        for tensor in response._output_tensors:
            name = tensor._name
            if requested is not None and name not in requested:
                continue
            entry = plain.get(name)
            if entry is not None and tensor._array.dtype == entry[1] and tensor._dtype != _BF16:
                parts.append((name, entry[0], tensor._array))
            else:
                parts.append(output_part(tensor, self._declared.get(name)))
        return parts
