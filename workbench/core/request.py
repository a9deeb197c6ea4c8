"""Protocol-neutral inference request and response.

HTTP and gRPC decode into these and encode from them; schedulers and backends never see the
wire format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from workbench._types import Parameters, Tensor
from workbench.backends.base import ResponseSender
from workbench.core.trace import InferenceTrace
from workbench.errors import InvalidArgumentError


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
    #: inputs the codec could not make an array of (see ``DeferredInput``), by name
    deferred_inputs: dict[str, DeferredInput] | None = None
    #: the shared-memory regions the request reads and writes (see ``SharedMemoryUse``)
    shared_memory: SharedMemoryUse | None = None
    #: set by a front end when the request is traced (``workbench.core.trace``)
    trace: InferenceTrace | None = None
    #: set by a front end to the decoding plan the request was cut out by: requests of one
    #: plan have the same inputs (names, datatypes, shapes) and outputs, so a model checks a
    #: plan once (``RequestChecker``); compared by identity
    plan: object | None = None


class OutputMemory(Protocol):
    """Where an output in shared memory is written: a system region's ``memoryview``, or a
    CUDA region's place that copies to the device when assigned."""

    def __len__(self) -> int: ...

    def __setitem__(self, where: slice, data: Any, /) -> None: ...


@dataclass(slots=True)
class SharedMemoryUse:
    """The shared-memory regions a front end lent one request (``server/shared_memory.py``).

    Inputs read from a system region are numpy views of it (from a CUDA region, of its host
    copy); the outputs named in ``outputs`` are written into their region, instead of into the
    reply, once the core has answered. The core passes this along untouched. ``release`` ends
    the request's use of the regions, which until then cannot be unregistered (Triton's
    ``SharedMemoryManager::UnregisterHelper``).
    """

    #: output name -> the bytes of its region it must fit in (the request's offset and size)
    outputs: dict[str, OutputMemory] = field(default_factory=dict)
    #: one per region reference taken for the request
    releases: list[Callable[[], None]] = field(default_factory=list)

    def release(self) -> None:
        releases, self.releases = self.releases, []
        for release in releases:
            release()


@dataclass(frozen=True, slots=True)
class DeferredInput:
    """An input whose data does not fit its shape, refused by the core rather than the codec.

    Triton's front ends pass shape and bytes on as they are; its core checks the shape
    against the configuration before the byte size (``InferenceRequest::Normalize``), so a
    wrong shape is what a request with both faults hears about. A codec that cannot make an
    array (negative or huge dims, a byte size or BYTES layout that does not match) leaves
    the tensor empty and records this; the core's checks then always refuse the request.
    """

    #: the shape as the request says it
    shape: tuple[int, ...]
    #: bytes of data the request carries for it
    byte_size: int
    #: what the codec found wrong, said once the shape checks pass (``None``: the core's own
    #: byte-size message)
    error: InvalidArgumentError | None = None


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    id: str = ""
    outputs: list[Tensor] = field(default_factory=list)
    parameters: Parameters = field(default_factory=dict)
    #: decoupled streams only: this is the last response of the request
    final: bool = True
