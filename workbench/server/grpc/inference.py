"""``ModelInfer``, and the request preparation it shares with ``ModelStreamInfer``.

The checks run in Triton 2.51's order (``ModelInferHandler::Execute``): the version string,
the model (and its transaction policy), the request parameters, the inputs and outputs; then
the core validates the request against the model configuration. Shared-memory regions a
request names are in use until its last response is encoded (``PreparedRequest.release``).
While tracing is on, a sampled call takes the same steps with its trace (``_traced``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig
from tritonclient.grpc.service_pb2 import ModelInferRequest, ModelInferResponse

from workbench.core.contract import ServingCore
from workbench.core.request import InferRequest, InferResponse
from workbench.core.trace_settings import TraceManager
from workbench.errors import UnsupportedError
from workbench.server.classification import classify_outputs
from workbench.server.grpc.parameters import RequestParameters, model_version
from workbench.server.grpc.request_codec import decode_request
from workbench.server.grpc.response_codec import encode_response
from workbench.server.grpc.tracing import GrpcTimestamps
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
        in_regions: dict[str, memoryview] = {}
        if self.request.shared_memory is not None:
            write_outputs(self.request.shared_memory, response)
            in_regions = self.request.shared_memory.outputs
        classify_outputs(core, self.request, response, self.config.max_batch_size > 0)
        filtered = self.request if self.decoupled else None
        return encode_response(response, filtered, limit, in_regions)

    def release(self) -> None:
        """End the request's use of its shared-memory regions (once it has been answered)."""
        if self.request.shared_memory is not None:
            self.request.shared_memory.release()


def model_config_of(core: ServingCore, message: ModelInferRequest) -> tuple[str, ModelConfig]:
    """The checked version string and the config of the model a request names."""
    version = model_version(message.model_version)
    return version, core.model_config(message.model_name, version)


def prepare(
    message: ModelInferRequest,
    version: str,
    config: ModelConfig,
    regions: SharedMemoryRegistry | None = None,
) -> PreparedRequest:
    request, parameters = decode_request(message, version, regions)
    return PreparedRequest(request, parameters, config)


class InferHandler:
    """Serves ``ModelInfer`` on one core."""

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

    async def __call__(self, message: ModelInferRequest, context: Any = None) -> ModelInferResponse:
        if self.tracer.enabled:
            trace = self.tracer.sample(message.model_name)
            if trace is not None:
                return await self._traced(message, context, GrpcTimestamps(trace))
        version, config = model_config_of(self.core, message)
        if config.model_transaction_policy.decoupled:
            raise UnsupportedError(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        prepared = prepare(message, version, config, self.regions)
        try:
            response = await self.core.infer(prepared.request)
            return prepared.encode(response, self.core, self.limit)
        finally:
            prepared.release()

    async def _traced(
        self, message: ModelInferRequest, context: Any, stamps: GrpcTimestamps
    ) -> ModelInferResponse:
        """The same call, traced; the trace is written when the call is done, failed or not."""
        try:
            version, config = model_config_of(self.core, message)
            if config.model_transaction_policy.decoupled:
                raise UnsupportedError(
                    "ModelInfer RPC doesn't support models with decoupled transaction policy"
                )
            prepared = prepare(message, version, config, self.regions)
            prepared.request.trace = stamps.trace
            stamps.trace.start()
            try:
                response = await self._answer(prepared, stamps)
            finally:
                prepared.release()
        finally:
            stamps.finish(context)
        return response

    async def _answer(
        self, prepared: PreparedRequest, stamps: GrpcTimestamps
    ) -> ModelInferResponse:
        try:
            response = await self.core.infer(prepared.request)
        finally:
            if stamps.trace.reported:  # a model answered, with an error or not
                stamps.stamp("INFER_RESPONSE_COMPLETE")
        return prepared.encode(response, self.core, self.limit)


__all__ = ["InferHandler", "PreparedRequest", "model_config_of", "prepare"]
