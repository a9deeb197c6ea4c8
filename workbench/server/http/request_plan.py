"""The usual binary infer request, decoded once per distinct JSON header.

Clients that use the binary tensor extension (perf_analyzer, ``tritonclient``) send the same
JSON header with every request of a given shape: ``id``, then inputs that each carry only
``parameters.binary_data_size``, then outputs with at most ``binary_data``. A ``RequestPlan``
is what such a header says, checked once; later requests with the same header bytes skip
the JSON parser and the validation and only cut their tensors out of the body.

A header that is anything else (JSON ``data``, request parameters, BYTES, shared memory,
classification, a size that does not fit) gets no plan and takes the full decoder in
``request_codec``, which owns every error text. So does a body whose length does not match
its plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench._types import Parameters, Tensor
from workbench.config.dtypes import WIRE_TO_NUMPY
from workbench.core.request import InferRequest
from workbench.memo import remember
from workbench.server.tensor_bytes import shape_fits

#: headers up to this long are remembered (``memo.LIMIT`` of them at most)
_CACHED_HEADER_BYTES = 4096
_INPUT_PARAMETERS = frozenset({"binary_data_size"})
_OUTPUT_PARAMETERS = frozenset({"binary_data"})

#: name, datatype, numpy dtype, shape, byte size
_Input = tuple[str, str, np.dtype, tuple[int, ...], int]
Body = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity (``InferRequest.plan``)
class RequestPlan:
    """A checked binary request header: what to cut out of the body, and what to return."""

    id: str
    inputs: tuple[_Input, ...]
    #: ``None`` when the request lists no outputs (every output, as JSON)
    outputs: tuple[tuple[str, Parameters], ...] | None
    #: bytes of tensor data after the header
    data_bytes: int

    def request(
        self, body: Body, offset: int, model_name: str, model_version: str
    ) -> InferRequest | None:
        """The request for a body whose header ends at ``offset``; ``None`` when the body's
        length does not match (the full decoder then says why)."""
        if offset + self.data_bytes != len(body):
            return None
        request = InferRequest(model_name, model_version, self.id, plan=self)
        inputs = request.inputs
        for name, datatype, dtype, shape, size in self.inputs:
            array: np.ndarray = np.ndarray(shape, dtype, body, offset)  # views the body
            inputs[name] = Tensor(name, datatype, array, {"binary_data_size": size})
            offset += size
        if self.outputs is not None:
            names: list[str] = []
            for name, params in self.outputs:
                names.append(name)
                request.output_parameters[name] = dict(params)
            request.requested_outputs = names
        return request


_plans: dict[bytes, RequestPlan] = {}


#: ``cached_plan(header)``: the plan made earlier for exactly these header bytes, if any (the
#: dict's own ``get``: no Python frame on the hot path; ``remember_plan`` keeps the same dict)
cached_plan = _plans.get


def remember_plan(header: bytes, plan: RequestPlan) -> None:
    if len(header) <= _CACHED_HEADER_BYTES:
        remember(_plans, header, plan)


def make_plan(document: Any) -> RequestPlan | None:
    """The plan of a parsed header, or ``None`` when it is not the usual binary request."""
    if type(document) is not dict or "parameters" in document:
        return None
    request_id = document.get("id", "")
    inputs = _inputs(document.get("inputs"))
    if type(request_id) is not str or inputs is None:
        return None
    outputs = None
    if "outputs" in document:
        outputs = _outputs(document["outputs"])
        if outputs is None:
            return None
    return RequestPlan(request_id, inputs, outputs, sum(spec[4] for spec in inputs))


def _inputs(specs: Any) -> tuple[_Input, ...] | None:
    if type(specs) is not list:
        return None
    inputs = tuple(_input(spec) for spec in specs)
    if None in inputs or len({spec[0] for spec in inputs if spec}) != len(inputs):
        return None  # the full decoder says what is wrong (e.g. an input named twice)
    return inputs  # type: ignore[return-value]


def _input(spec: Any) -> _Input | None:
    if type(spec) is not dict or "data" in spec:
        return None
    params, name, datatype = spec.get("parameters"), spec.get("name"), spec.get("datatype")
    if type(params) is not dict or params.keys() != _INPUT_PARAMETERS:
        return None
    if type(name) is not str or type(datatype) is not str or datatype == "BYTES":
        return None
    if datatype not in WIRE_TO_NUMPY:
        return None
    shape, size = spec.get("shape"), params["binary_data_size"]
    if type(shape) is not list or not all(type(dim) is int and dim >= 0 for dim in shape):
        return None
    if not shape_fits(shape):
        return None
    dtype = WIRE_TO_NUMPY[datatype]
    if type(size) is not int or size != math.prod(shape) * dtype.itemsize:
        return None
    return name, datatype, dtype, tuple(shape), size


def _outputs(specs: Any) -> tuple[tuple[str, Parameters], ...] | None:
    if type(specs) is not list:
        return None
    outputs = tuple(_output(spec) for spec in specs)
    if None in outputs or len({spec[0] for spec in outputs if spec}) != len(outputs):
        return None  # the full decoder keeps the first of an output named twice
    return outputs  # type: ignore[return-value]


def _output(spec: Any) -> tuple[str, Parameters] | None:
    if type(spec) is not dict or type(spec.get("name")) is not str:
        return None
    params = spec.get("parameters") or {}
    if type(params) is not dict or not params.keys() <= _OUTPUT_PARAMETERS:
        return None
    if type(params.get("binary_data", False)) is not bool:
        return None
    return spec["name"], params


__all__ = ["Body", "RequestPlan", "cached_plan", "make_plan", "remember_plan", "shape_fits"]
