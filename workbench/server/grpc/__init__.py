"""Triton's gRPC protocol (``inference.GRPCInferenceService``) served with ``grpc.aio``.

``GrpcFrontend(core, GrpcOptions(...), log_settings=..., extensions=...)`` is started and
stopped on the server's event loop by the hosting code.
"""

from workbench.server.grpc.frontend import COMPRESSION_LEVELS, GrpcFrontend, GrpcOptions

__all__ = ["COMPRESSION_LEVELS", "GrpcFrontend", "GrpcOptions"]
