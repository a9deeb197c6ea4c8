"""The usual ``ModelInferRequest``, parsed and decoded once per distinct message layout.

A client sends the same message with every request of a given shape, but for the bytes of
its ``raw_input_contents``: perf_analyzer, ``tritonclient`` and Triton's example clients do.
So, as the HTTP side remembers a binary request's JSON header (``http/request_plan.py``), a
``Layout`` remembers a message: its length, its bytes outside the raw input contents and
where those contents lie (the protobuf walk of ``raw_inputs``), and the rest of the message
parsed once. A later message of that length whose other bytes are the same is the same
message with other tensor bytes: it gets the parsed rest again (no protobuf parse) and,
once the first one decoded as a plain request (every input in the raw contents, none of them
BYTES, no shared memory), that request's ``RequestPlan``, so that only its tensors are cut
out of the bytes (numpy views, no copy). Each plan was made by the full decoder
(``request_codec``), which owns every check and error text; a message that matches no layout
takes it as before.

A message without raw input contents (typed ``contents``, shared memory) is its own layout:
the same message again is not parsed again, and is decoded by the full decoder each time (a
shared-memory region is looked up per request). A message with more than 4 KiB outside its
tensors (a long id or parameter) gets no layout: its length is walked again only after 8 more.

The parsed rest is shared by the requests of a layout: nothing may change it (nothing does:
the service only reads messages).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tritonclient.grpc.service_pb2 import ModelInferRequest

from workbench._types import Parameters, Tensor
from workbench.core.request import InferRequest
from workbench.memo import remember
from workbench.server.grpc.parameters import RequestParameters

#: a message with more bytes than this outside its raw input contents gets no layout
_CACHED_FIXED_BYTES = 4096
#: a message that does not match the layout of its length replaces that layout only after
#: this many such misses beyond twice its hits: clients whose every message differs (a new
#: ``id`` each time) pay the walk for one message in this many, not for each
_REPLACE_AFTER = 8

#: name, datatype, numpy dtype, shape, offset of its bytes in the message
_Input = tuple[str, str, np.dtype, tuple[int, ...], int]


@dataclass(frozen=True, slots=True, eq=False)  # compared by identity (``InferRequest.plan``)
class RequestPlan:
    """A message's decoded request, less its tensors' bytes."""

    model_name: str
    version: str
    id: str
    parameters: Parameters
    empty_final_response: bool
    inputs: tuple[_Input, ...]
    outputs: tuple[str, ...] | None
    output_parameters: tuple[tuple[str, Parameters], ...]

    def request(self, data: bytes) -> tuple[InferRequest, RequestParameters]:
        """The request (and its parameters) of a message of this plan's layout."""
        values = dict(self.parameters)
        request = InferRequest(self.model_name, self.version, self.id, parameters=values, plan=self)
        inputs = request.inputs
        for name, datatype, dtype, shape, offset in self.inputs:
            inputs[name] = Tensor(name, datatype, np.ndarray(shape, dtype, data, offset))
        if self.outputs is not None:
            request.requested_outputs = list(self.outputs)
            for name, params in self.output_parameters:
                request.output_parameters[name] = dict(params)
        return request, RequestParameters(values, self.empty_final_response)


@dataclass(slots=True, eq=False)
class Layout:
    """One message's bytes outside its raw input contents, and that rest parsed."""

    size: int
    #: (offset, bytes) of every stretch outside the raw input contents
    fixed: tuple[tuple[int, bytes], ...]
    #: (offset, length) of each raw input contents, in order
    raw: tuple[tuple[int, int], ...]
    #: the message without its raw input contents (shared: read only)
    message: ModelInferRequest
    #: the decoded request, once one message of this layout decoded as a plain request
    plan: RequestPlan | None = None
    #: whether the plan was tried (a message that is not plain gets none, once)
    planned: bool = False
    hits: int = 0
    misses: int = 0

    def matches(self, data: bytes) -> bool:
        """Whether ``data`` (of ``size`` bytes) is this layout's message with other tensors."""
        for offset, stretch in self.fixed:
            if not data.startswith(stretch, offset):
                return False
        return True

    def views(self, data: bytes) -> list[memoryview]:
        """The raw input contents of ``data`` as views of it."""
        return views_of(data, self.raw)

    def remember(self, request: InferRequest, params: RequestParameters) -> None:
        """Keep the plan of ``request``, the full decoder's request for a message of this
        layout, when it is plain; once per layout."""
        self.planned = True
        if (
            request.shared_memory is not None
            or request.deferred_inputs
            or len(request.inputs) != len(self.raw)
            or any(spec.HasField("contents") for spec in self.message.inputs)
        ):
            return
        inputs: list[_Input] = []
        for tensor, (offset, length) in zip(request.inputs.values(), self.raw, strict=True):
            array = tensor.array
            if array.dtype.hasobject or array.nbytes != length or tensor.parameters:
                return
            inputs.append((tensor.name, tensor.datatype, array.dtype, array.shape, offset))
        outputs = request.requested_outputs
        self.plan = RequestPlan(
            model_name=request.model_name,
            version=request.model_version,
            id=request.id,
            parameters=dict(request.parameters),
            empty_final_response=params.empty_final_response,
            inputs=tuple(inputs),
            outputs=None if outputs is None else tuple(outputs),
            output_parameters=tuple(
                (name, dict(p)) for name, p in request.output_parameters.items()
            ),
        )


@dataclass(slots=True)
class _Layouts:
    by_size: dict[int, Layout] = field(default_factory=dict)
    #: lengths whose last message had too much outside its tensors to remember, and how many
    #: messages of that length came since (walked again after ``_REPLACE_AFTER``)
    declined: dict[int, int] = field(default_factory=dict)

    def find(self, data: bytes) -> Layout | None:
        """The layout ``data`` matches, if any (counted as a hit or a miss)."""
        layout = self.by_size.get(len(data))
        if layout is None:
            return None
        if layout.matches(data):
            layout.hits += 1
            return layout
        layout.misses += 1
        return None

    def wanted(self, size: int) -> bool:
        """Whether a message of ``size`` bytes that matched none should get a layout."""
        layout = self.by_size.get(size)
        if layout is not None:
            return layout.misses > 2 * layout.hits + _REPLACE_AFTER
        skipped = self.declined.get(size)
        if skipped is None:
            return True
        if skipped >= _REPLACE_AFTER:
            del self.declined[size]
            return True
        self.declined[size] = skipped + 1
        return False

    def add(
        self, data: bytes, raw: Sequence[tuple[int, int]], message: ModelInferRequest
    ) -> Layout | None:
        """The layout of ``data``, whose raw input contents lie at ``raw`` (none: the whole
        message is its layout), remembered; None when more than ``_CACHED_FIXED_BYTES`` lie
        outside them (a large id, parameter or typed contents: not worth holding)."""
        if len(data) - sum(length for _, length in raw) > _CACHED_FIXED_BYTES:
            self.by_size.pop(len(data), None)  # (decided before copying any of it)
            remember(self.declined, len(data), 0)
            return None
        fixed: list[tuple[int, bytes]] = []
        at = 0
        for offset, length in raw:
            if offset > at:
                fixed.append((at, data[at:offset]))
            at = offset + length
        if at < len(data):
            fixed.append((at, data[at:]))
        layout = Layout(len(data), tuple(fixed), tuple(raw), message)
        return remember(self.by_size, len(data), layout)


def views_of(data: bytes, spans: Sequence[tuple[int, int]]) -> list[memoryview]:
    """The ``(offset, length)`` spans of ``data`` as views of it (no copy)."""
    view = memoryview(data)
    return [view[offset : offset + length] for offset, length in spans]


#: the process's layouts (as the HTTP side's plans: requests are alike across servers)
LAYOUTS = _Layouts()


__all__ = ["LAYOUTS", "Layout", "RequestPlan", "views_of"]
