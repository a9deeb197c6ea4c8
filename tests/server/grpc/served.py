"""The fake core served over gRPC on a loop of its own, for the gRPC front-end tests."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import tritonclient.grpc as grpcclient
import uvloop
from tritonclient.grpc import service_pb2_grpc

from tests.server.fake_core import FakeCore
from workbench.core.trace_settings import TraceManager
from workbench.server.grpc import GrpcFrontend, GrpcOptions, native
from workbench.server.http.endpoints import DEFAULT_EXTENSIONS
from workbench.server.log_settings import LogSettings


@dataclass
class GrpcServer:
    """A served fake core: the core, the log settings, ``host:port`` and a raw stub."""

    core: FakeCore
    log_settings: LogSettings
    url: str
    loop: asyncio.AbstractEventLoop
    frontend: GrpcFrontend

    def client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.url)

    def stub(self, **channel_options: Any) -> service_pb2_grpc.GRPCInferenceServiceStub:
        channel = grpc.insecure_channel(self.url, options=list(channel_options.items()))
        return service_pb2_grpc.GRPCInferenceServiceStub(channel)


#: the gRPC servers the front-end tests run on: gRPC's C++ server where it is built, and grpcio
BUILT_SERVERS = ["native", "grpcio"] if native.available() else ["grpcio"]


def serve_grpc(
    options: GrpcOptions | None = None,
    core: FakeCore | None = None,
    tracer: TraceManager | None = None,
    implementation: str = "auto",
) -> Iterator[GrpcServer]:
    """Serve a fake core (a fresh one by default) on a uvloop loop in a thread; yields once
    listening. ``implementation`` replaces the options' own."""
    core = core or FakeCore()
    settings = LogSettings(logger_name="workbench.test_grpc")
    options = options or GrpcOptions(port=0, address="127.0.0.1")
    if implementation != "auto":
        options = dataclasses.replace(options, implementation=implementation)
    frontend = GrpcFrontend(
        core,  # type: ignore[arg-type]
        options,
        log_settings=settings,
        extensions=DEFAULT_EXTENSIONS,
        tracer=tracer,
    )
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        port = asyncio.run_coroutine_threadsafe(frontend.start(), loop).result(30)
        yield GrpcServer(core, settings, f"127.0.0.1:{port}", loop, frontend)
    finally:
        asyncio.run_coroutine_threadsafe(frontend.stop(1.0), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
