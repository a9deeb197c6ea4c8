"""``inference.GRPCInferenceService`` over an ``InferenceCore``.

The messages are Triton's generated ``service_pb2`` classes (shipped in ``tritonclient[grpc]``);
each RPC mirrors its handler in Triton 2.51's ``src/grpc/grpc_server.cc``. Health, metadata,
configuration and statistics are answered here; inference, streaming and the control RPCs
live in their own modules.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from workbench.core.contract import ServingCore
from workbench.core.trace_settings import TraceManager
from workbench.server.grpc import control
from workbench.server.grpc.aborts import abort, aborts_on_error
from workbench.server.grpc.inference import InferHandler, Serialized
from workbench.server.grpc.parameters import model_version
from workbench.server.grpc.raw_inputs import ReceivedInfer
from workbench.server.grpc.stream import serve_stream
from workbench.server.heap import TRIM_AFTER_BYTES, trim_after_reply
from workbench.server.log_settings import LogSettings
from workbench.server.shared_memory import SharedMemoryRegistry

Context = Any  # grpc.aio.ServicerContext, untyped in grpcio


class InferenceService(service_pb2_grpc.GRPCInferenceServiceServicer):
    """The servicer registered on the ``grpc.aio`` server."""

    def __init__(
        self,
        core: ServingCore,
        *,
        log_settings: LogSettings,
        extensions: tuple[str, ...],
        max_message_bytes: int,
        compression: Any = None,
        shared_memory: SharedMemoryRegistry | None = None,
        tracer: TraceManager | None = None,
    ) -> None:
        self.core = core
        #: the trace settings (the server's, which HTTP shares)
        self.tracer = tracer if tracer is not None else TraceManager()
        self.log_settings = log_settings
        self.extensions = extensions
        self.max_message_bytes = max_message_bytes
        #: ``grpc.Compression`` for infer responses, ``None`` for none
        self.compression = compression
        #: the registered shared-memory regions (the server's, which HTTP shares)
        self.shared_memory = shared_memory if shared_memory is not None else SharedMemoryRegistry()
        self._infer = InferHandler(core, max_message_bytes, self.shared_memory, self.tracer)

    # -- health and metadata -------------------------------------------------------------------
    @aborts_on_error
    async def ServerLive(self, request: pb.ServerLiveRequest, context: Context) -> Message:
        return pb.ServerLiveResponse(live=self.core.live)

    @aborts_on_error
    async def ServerReady(self, request: pb.ServerReadyRequest, context: Context) -> Message:
        return pb.ServerReadyResponse(ready=self.core.ready)

    @aborts_on_error
    async def ModelReady(self, request: pb.ModelReadyRequest, context: Context) -> Message:
        version = model_version(request.version)
        return pb.ModelReadyResponse(ready=self.core.model_ready(request.name, version))

    @aborts_on_error
    async def ServerMetadata(self, request: pb.ServerMetadataRequest, context: Context) -> Message:
        return pb.ServerMetadataResponse(
            name=self.core.server_name,
            version=self.core.server_version,
            extensions=list(self.extensions),
        )

    @aborts_on_error
    async def ModelMetadata(self, request: pb.ModelMetadataRequest, context: Context) -> Message:
        metadata = self.core.model_metadata(request.name, model_version(request.version))
        return json_format.ParseDict(
            metadata, pb.ModelMetadataResponse(), ignore_unknown_fields=True
        )

    @aborts_on_error
    async def ModelConfig(self, request: pb.ModelConfigRequest, context: Context) -> Message:
        config = self.core.model_config(request.name, model_version(request.version))
        return pb.ModelConfigResponse(config=config)

    @aborts_on_error
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> Message:
        stats = self.core.statistics(request.name, model_version(request.version))
        return json_format.ParseDict(
            stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True
        )

    # -- inference -----------------------------------------------------------------------------
    @aborts_on_error
    async def ModelInfer(self, request: ReceivedInfer, context: Context) -> Serialized:
        # The request as ``raw_inputs.parse_infer_request`` read it, its raw inputs in grpc's
        # bytes (see ``unparsable.add_service``); the answer is the serialised response (its
        # parts from 64 KiB: the native front end sends them unjoined, grpcio's joins them).
        reply = await self._infer(request, context)
        if self.compression is not None:
            context.set_compression(self.compression)
        if reply.received_bytes >= TRIM_AFTER_BYTES or reply.size >= TRIM_AFTER_BYTES:
            trim_after_reply()
        return reply.payload

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterable[pb.ModelInferRequest], context: Context
    ) -> None:
        if self.compression is not None:
            context.set_compression(self.compression)
        try:
            await serve_stream(
                self.core,
                request_iterator,
                context,
                self.max_message_bytes,
                self.shared_memory,
                self.tracer,
            )
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - a bug ends this stream, not the server
            await abort(context, exc)

    # -- repository, logging, trace ------------------------------------------------------------
    @aborts_on_error
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> Message:
        return control.repository_index(self.core, request)

    @aborts_on_error
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> Message:
        return await control.load(self.core, request)

    @aborts_on_error
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> Message:
        return await control.unload(self.core, request)

    @aborts_on_error
    async def LogSettings(self, request: pb.LogSettingsRequest, context: Context) -> Message:
        return control.log_settings(self.log_settings, request)

    @aborts_on_error
    async def TraceSetting(self, request: pb.TraceSettingRequest, context: Context) -> Message:
        return control.trace_setting(self.core, self.tracer, request)

    # -- shared memory -------------------------------------------------------------------------
    @aborts_on_error
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: Context
    ) -> Message:
        return control.system_shm_status(self.shared_memory, request)

    @aborts_on_error
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: Context
    ) -> Message:
        return control.system_shm_register(self.shared_memory, request)

    @aborts_on_error
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: Context
    ) -> Message:
        return control.system_shm_unregister(self.shared_memory, request)

    @aborts_on_error
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: Context
    ) -> Message:
        return control.cuda_shm_status(self.shared_memory, request)

    @aborts_on_error
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: Context
    ) -> Message:
        return control.cuda_shm_register(self.shared_memory, request)

    @aborts_on_error
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: Context
    ) -> Message:
        return control.cuda_shm_unregister(self.shared_memory, request)


__all__ = ["InferenceService"]
