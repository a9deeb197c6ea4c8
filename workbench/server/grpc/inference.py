"""``ModelInfer``, and the request preparation it shares with ``ModelStreamInfer``.

The checks run in Triton 2.51's order (``ModelInferHandler::Execute``): the version string,
the model (and its transaction policy), the request parameters, the inputs and outputs; then
the core validates the request against the model configuration. Shared-memory regions a
request names are in use until its last response is encoded (``PreparedRequest.release``).
While tracing is on, a sampled call takes the same steps with its trace (``_traced``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.grpc.service_pb2 import ModelInferRequest, ModelInferResponse

from workbench.core.contract import ServingCore
from workbench.core.request import InferRequest, InferResponse, OutputMemory
from workbench.core.trace_settings import TraceManager
from workbench.errors import UnsupportedError
from workbench.server.classification import classify_outputs
from workbench.server.grpc.parameters import RequestParameters, model_version
from workbench.server.grpc.raw_inputs import ReceivedInfer
from workbench.server.grpc.request_codec import decode_request
from workbench.server.grpc.response_codec import encode_response, serialize_response_parts
from workbench.server.grpc.tracing import GrpcTimestamps, metadata
from workbench.server.shared_memory import SharedMemoryRegistry, write_outputs


@dataclass(slots=True)
class PreparedRequest:
    """A decoded request with what its responses need: its model's config and parameters."""

    request: InferRequest
    parameters: RequestParameters
    config: ModelConfig

    @property
    def decoupled(self) -> bool:
        return bool(self.config.model_transaction_policy.decoupled)

    def encode(self, response: InferResponse, core: ServingCore, limit: int) -> ModelInferResponse:
        """One response as its message, after the classification extension (and with the
        outputs asked for in shared memory written there)."""
        filtered, in_regions = self._finish(response, core)
        return encode_response(response, filtered, limit, in_regions)

    def serialize(self, response: InferResponse, core: ServingCore, limit: int) -> Serialized:
        """``encode(...)``'s serialised bytes, or from 64 KiB their parts, each a view
        (``response_codec.serialize_response_parts``)."""
        filtered, in_regions = self._finish(response, core)
        return serialize_response_parts(response, filtered, limit, in_regions)

    def _finish(
        self, response: InferResponse, core: ServingCore
    ) -> tuple[InferRequest | None, dict[str, OutputMemory]]:
        """Write the outputs asked for in shared memory, classify: (the request to filter the
        outputs by, or None, and the outputs written into regions)."""
        in_regions: dict[str, OutputMemory] = {}
        if self.request.shared_memory is not None:
            write_outputs(self.request.shared_memory, response)
            in_regions = self.request.shared_memory.outputs
        classify_outputs(core, self.request, response, self.config.max_batch_size > 0)
        return (self.request if self.decoupled else None), in_regions

    def input_bytes(self) -> int:
        """Bytes of the request's input arrays (those of its raw contents, when it has some:
        inputs come either all in the message or in shared memory or typed ``contents``)."""
        return sum(tensor.array.nbytes for tensor in self.request.inputs.values())

    def release(self) -> None:
        """End the request's use of its shared-memory regions (once it has been answered)."""
        if self.request.shared_memory is not None:
            self.request.shared_memory.release()


def model_config_of(core: ServingCore, message: ModelInferRequest) -> tuple[str, ModelConfig]:
    """The checked version string and the config of the model a request names."""
    version = model_version(message.model_version)
    return version, core.model_config(message.model_name, version)


def prepare_received(
    received: ReceivedInfer,
    version: str,
    config: ModelConfig,
    regions: SharedMemoryRegistry | None = None,
) -> PreparedRequest:
    """``received`` decoded: by its layout's plan when it has one (``request_plan.py``), else
    by the full decoder, whose request then becomes the layout's plan when it is plain."""
    layout = received.layout
    plan = None if layout is None else layout.plan
    # The version is the one the request resolved to, not the message's field: a message
    # without one is replayed by its plan only while the same version serves it.
    if plan is not None and plan.version == version:
        request, parameters = plan.request(received.data)
        return PreparedRequest(request, parameters, config)
    prepared = prepare(received.message, version, config, regions, received.raw)
    if layout is not None and not layout.planned:
        layout.remember(prepared.request, prepared.parameters)
    return prepared


def prepare(
    message: ModelInferRequest,
    version: str,
    config: ModelConfig,
    regions: SharedMemoryRegistry | None = None,
    raw: Sequence[bytes | memoryview] | None = None,
) -> PreparedRequest:
    """``message`` decoded (its raw input contents from ``raw`` when they were cut out of it)."""
    request, parameters = decode_request(message, version, regions, raw)
    return PreparedRequest(request, parameters, config)


#: a serialised message: its bytes, or its parts in order (to be sent unjoined where possible)
Serialized = bytes | list[Any]


class InferReply(NamedTuple):
    """A ``ModelInfer`` answer: the serialised ``ModelInferResponse`` and how many bytes of
    tensor data the request carried in its message."""

    payload: Serialized
    received_bytes: int

    @property
    def size(self) -> int:
        """The serialised response's length in bytes."""
        if isinstance(self.payload, bytes):
            return len(self.payload)
        return sum(len(part) for part in self.payload)


class InferHandler:
    """Serves ``ModelInfer`` on one core; answers with the response's bytes (see
    ``response_codec.serialize_response``), which the service's serializer passes on."""

    def __init__(
        self,
        core: ServingCore,
        limit: int,
        regions: SharedMemoryRegistry | None = None,
        tracer: TraceManager | None = None,
    ) -> None:
        self.core = core
        self.limit = limit
        self.regions = regions
        self.tracer = tracer if tracer is not None else TraceManager()

    async def __call__(self, received: ReceivedInfer, context: Any = None) -> InferReply:
        message = received.message
        if self.tracer.enabled:
            carrier = metadata(context) if self.tracer.propagates else None
            trace = self.tracer.sample(message.model_name, carrier)
            if trace is not None:
                return await self._traced(received, context, GrpcTimestamps(trace))
        version, config = model_config_of(self.core, message)
        if config.model_transaction_policy.decoupled:
            raise UnsupportedError(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        prepared = prepare_received(received, version, config, self.regions)
        try:
            response = await self.core.infer(prepared.request)
            payload = prepared.serialize(response, self.core, self.limit)
            return InferReply(payload, _raw_bytes(received, prepared))
        finally:
            prepared.release()

    async def _traced(
        self, received: ReceivedInfer, context: Any, stamps: GrpcTimestamps
    ) -> InferReply:
        """The same call, traced; the trace is written when the call is done, failed or not."""
        message = received.message
        try:
            version, config = model_config_of(self.core, message)
            if config.model_transaction_policy.decoupled:
                raise UnsupportedError(
                    "ModelInfer RPC doesn't support models with decoupled transaction policy"
                )
            prepared = prepare_received(received, version, config, self.regions)
            prepared.request.trace = stamps.trace
            stamps.trace.start()
            try:
                payload = await self._answer(prepared, stamps)
            finally:
                prepared.release()
        finally:
            stamps.finish(context)
        return InferReply(payload, _raw_bytes(received, prepared))

    async def _answer(self, prepared: PreparedRequest, stamps: GrpcTimestamps) -> Serialized:
        try:
            response = await self.core.infer(prepared.request)
        finally:
            if stamps.trace.reported:  # a model answered, with an error or not
                stamps.stamp("INFER_RESPONSE_COMPLETE")
        return prepared.serialize(response, self.core, self.limit)


def _raw_bytes(received: ReceivedInfer, prepared: PreparedRequest) -> int:
    """How much tensor data came in the message itself (sized from the arrays: every read of
    a protobuf ``bytes`` field copies it)."""
    return prepared.input_bytes() if len(received.raw) else 0


__all__ = [
    "InferHandler",
    "InferReply",
    "PreparedRequest",
    "Serialized",
    "model_config_of",
    "prepare",
]
