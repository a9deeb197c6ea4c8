"""Protocol-neutral inference request and response.

HTTP and gRPC decode into these and encode from them; schedulers and backends never see the
wire format.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench._types import Parameters, Tensor
from workbench.backends.base import ResponseSender


@dataclass(slots=True)
class InferRequest:
    model_name: str
    #: requested version as a string; "" lets the version policy choose (latest ready)
    model_version: str = ""
    id: str = ""
    inputs: dict[str, Tensor] = field(default_factory=dict)
    #: names of the outputs asked for, in order; ``None`` means every output of the model
    requested_outputs: list[str] | None = None
    #: per requested output, its parameters (``binary_data``, ``classification``)
    output_parameters: dict[str, Parameters] = field(default_factory=dict)
    parameters: Parameters = field(default_factory=dict)
    #: set by the core for decoupled models (see ``workbench.backends.base.ResponseSender``)
    respond: ResponseSender | None = None
    #: inputs whose shape has negative dims (gRPC raw contents can say so; no array can hold
    #: it): name -> (shape, bytes received). Their tensors are empty; the checks refuse them
    #: with Triton's message for that shape.
    declared_shapes: dict[str, tuple[tuple[int, ...], int]] | None = None


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: Parameters = field(default_factory=dict)
    #: decoupled streams only: this is the last response of the request
    final: bool = True
