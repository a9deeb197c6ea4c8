"""``--grpc-restricted-protocol``: a server interceptor that refuses restricted RPCs.

Installed only when some group is restricted, so an unrestricted server pays nothing per call.
A refused call ends with UNAVAILABLE "This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'", as Triton 2.51 answers (a stream ends with it before reading).
The RPC-to-group table is ``grpc_server.cc``'s ``restricted_keys_.Get(...)`` per handler.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from workbench.server.restricted import Restriction, Restrictions

_SERVICE = "/inference.GRPCInferenceService/"
#: RPC name -> its restricted group
RPC_GROUPS = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "TraceSetting": "trace",
    "LogSettings": "logging",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
}
_STREAMING = {"ModelStreamInfer"}


class RestrictedMethods:
    """Which calls a restriction refuses: those to a restricted RPC without its metadata."""

    def __init__(self, restrictions: Restrictions) -> None:
        #: full method path -> its restriction, for the restricted RPCs only
        self._by_method = {
            _SERVICE + rpc: restrictions[group]
            for rpc, group in RPC_GROUPS.items()
            if group in restrictions
        }

    def refusal(self, method: str, metadata: Iterable[tuple[str, Any]] | None) -> str | None:
        """Triton's refusal of a call to ``method`` (a full path) with ``metadata``, or None
        when the call may go on."""
        restriction = self._by_method.get(method)
        if restriction is None or restriction.allows(_metadata_value(metadata, restriction)):
            return None
        return restriction.grpc_refusal


class RestrictionInterceptor(grpc.aio.ServerInterceptor):
    """Answers a restricted RPC without its metadata key with Triton's refusal."""

    def __init__(self, restrictions: Restrictions) -> None:
        self._restricted = RestrictedMethods(restrictions)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        method = handler_call_details.method
        refusal = self._restricted.refusal(method, handler_call_details.invocation_metadata)
        if refusal is None:
            return await continuation(handler_call_details)
        return _refusal_handler(refusal, method.rsplit("/", 1)[-1] in _STREAMING)


def _metadata_value(
    metadata: Iterable[tuple[str, Any]] | None, restriction: Restriction
) -> str | None:
    key = restriction.lookup.decode("latin-1")
    for item_key, value in metadata or ():
        if item_key == key:
            return value if isinstance(value, str) else None
    return None


def _refusal_handler(message: str, streaming: bool) -> grpc.RpcMethodHandler:
    async def refuse_unary(request: bytes, context: Any) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    async def refuse_stream(requests: Any, context: Any) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    if streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_stream)
    return grpc.unary_unary_rpc_method_handler(refuse_unary)


__all__ = ["RPC_GROUPS", "RestrictedMethods", "RestrictionInterceptor"]
