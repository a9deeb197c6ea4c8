"""The native gRPC front end (``native.py`` over ``_native.cpp``: gRPC's C++ server) where it
is built, and the choice between it and grpcio's server.

The behaviour both servers share (every RPC, its errors, streams) is tested on both by the
other modules of this folder; here is what only the native one does: how it hands calls to
the loop, ends the calls Python never answers, refuses unknown methods, and where a large
request lands.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from tests.server.fake_core import FakeCore, _config, _io
from tests.server.grpc.served import BUILT_SERVERS, GrpcServer, serve_grpc
from workbench import shared_buffers
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError
from workbench.server.grpc import GrpcFrontend, GrpcOptions, frontend, native
from workbench.server.log_settings import LogSettings

needs_native = pytest.mark.skipif(
    not native.available(), reason="the native gRPC front end is not built here"
)
Input = pb.ModelInferRequest.InferInputTensor


def test_ci_builds_the_native_front_end() -> None:
    # CI installs gRPC's C++ library first (.ci/test), so a build that broke must fail here
    # rather than leave every gRPC test on grpcio unnoticed.
    if os.environ.get("WORKBENCH_REQUIRE_NATIVE_GRPC") != "1":
        pytest.skip("WORKBENCH_REQUIRE_NATIVE_GRPC is not set")
    assert native.available()


def _frontend(implementation: str) -> GrpcFrontend:
    return GrpcFrontend(
        FakeCore(),  # type: ignore[arg-type]
        GrpcOptions(port=0, implementation=implementation),
        log_settings=LogSettings(logger_name="workbench.test_grpc"),
        extensions=(),
    )


def test_auto_takes_the_native_server_where_built(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _frontend("auto").implementation == ("native" if native.available() else "grpcio")
    assert _frontend("grpcio").implementation == "grpcio"
    monkeypatch.setattr(frontend, "native_available", lambda: False)
    assert _frontend("auto").implementation == "grpcio"
    with pytest.raises(InvalidArgumentError, match="apt-get install libgrpc"):
        _frontend("native")


def test_an_unknown_implementation_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="--grpc-implementation: 'tonic'"):
        _frontend("tonic")


class _GatedCore(FakeCore):
    """``add_one`` waits for ``release``; the arrays its requests carried are kept."""

    def __init__(self) -> None:
        super().__init__()
        # add_one without a batch limit, for a large request
        self.configs["add_one"] = _config(
            {
                "name": "add_one",
                "input": [_io("INPUT0", "TYPE_FP32", [-1, 16])],
                "output": [_io("OUTPUT0", "TYPE_FP32", [-1, 16])],
            }
        )
        self.release = asyncio.Event()
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.inputs: list[np.ndarray] = []

    async def infer(self, request: InferRequest) -> InferResponse:
        self.inputs.append(request.inputs["INPUT0"].array)
        if request.parameters.get("wait"):
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return await super().infer(request)


@pytest.fixture
def gated() -> Iterator[GrpcServer]:
    if not native.available():
        pytest.skip("the native gRPC front end is not built here")
    yield from serve_grpc(core=_GatedCore(), implementation="native")


def _add_one(rows: int = 1, **params: Any) -> pb.ModelInferRequest:
    data = np.ones((rows, 16), np.float32)
    request = pb.ModelInferRequest(
        model_name="add_one",
        inputs=[Input(name="INPUT0", datatype="FP32", shape=list(data.shape))],
        raw_input_contents=[data.tobytes()],
    )
    for key, value in params.items():
        request.parameters[key].bool_param = value
    return request


@needs_native
def test_a_cancelled_call_cancels_its_handler_and_the_server_goes_on(gated: GrpcServer) -> None:
    core: Any = gated.core
    stub = gated.stub()
    future = stub.ModelInfer.future(_add_one(wait=True))
    assert core.started.wait(10)
    future.cancel()
    assert core.cancelled.wait(10), "the handler was not cancelled"
    reply = stub.ModelInfer(_add_one(), timeout=10)
    assert np.frombuffer(reply.raw_output_contents[0], np.float32)[0] == 2.0


@needs_native
def test_a_deadline_ends_the_call_with_deadline_exceeded(gated: GrpcServer) -> None:
    core: Any = gated.core
    with pytest.raises(grpc.RpcError) as info:
        gated.stub().ModelInfer(_add_one(wait=True), timeout=0.5)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
    assert core.cancelled.wait(10)


@needs_native
def test_an_unknown_method_is_unimplemented(gated: GrpcServer) -> None:
    channel = grpc.insecure_channel(gated.url)
    call = channel.unary_unary("/inference.GRPCInferenceService/NoSuchRpc")
    with pytest.raises(grpc.RpcError) as info:
        call(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED  # type: ignore[attr-defined]
    assert gated.client().is_server_live()


@needs_native
def test_a_stream_message_that_is_not_a_request_ends_the_stream(gated: GrpcServer) -> None:
    channel = grpc.insecure_channel(gated.url)
    stream = channel.stream_stream(
        "/inference.GRPCInferenceService/ModelStreamInfer",
        request_serializer=lambda data: data,
        response_deserializer=pb.ModelStreamInferResponse.FromString,
    )
    with pytest.raises(grpc.RpcError) as info:
        list(stream(iter([b"\xff\xff\xff"]), timeout=10))
    assert info.value.code() == grpc.StatusCode.INTERNAL  # type: ignore[attr-defined]
    assert info.value.details() == "Unable to parse request"  # type: ignore[attr-defined]


@needs_native
def test_a_large_request_arrives_in_a_buffer_a_stub_can_map(gated: GrpcServer) -> None:
    # Issue #12: a ModelInfer request of SHARED_BYTES or more is copied by gRPC's thread into
    # a memfd, which a Python model's stub maps instead of receiving a copy.
    if not shared_buffers.available():
        pytest.skip("no memfd here")
    core: Any = gated.core
    rows = shared_buffers.SHARED_BYTES // 64 + 1
    limits = {"grpc.max_send_message_length": -1, "grpc.max_receive_message_length": -1}
    gated.stub(**limits).ModelInfer(_add_one(rows=rows), timeout=30)
    gated.stub().ModelInfer(_add_one(rows=1), timeout=30)
    large, small = core.inputs[-2:]
    assert large.shape == (rows, 16) and float(large[-1, -1]) == 1.0
    assert shared_buffers.ref_of(large) is not None
    assert shared_buffers.ref_of(small) is None


@needs_native
def test_stopping_cancels_the_calls_left_after_the_grace_period(gated: GrpcServer) -> None:
    core: Any = gated.core
    future = gated.stub().ModelInfer.future(_add_one(wait=True))
    assert core.started.wait(10)
    asyncio.run_coroutine_threadsafe(gated.frontend.stop(0.2), gated.loop).result(30)
    with pytest.raises(grpc.RpcError) as info:
        future.result(timeout=10)
    assert info.value.code() in (  # type: ignore[attr-defined]
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNAVAILABLE,
    )
    assert core.cancelled.wait(10)


@needs_native
def test_a_call_in_flight_finishes_within_the_grace_period(gated: GrpcServer) -> None:
    core: Any = gated.core
    future = gated.stub().ModelInfer.future(_add_one(wait=True))
    assert core.started.wait(10)
    stopping = asyncio.run_coroutine_threadsafe(gated.frontend.stop(10.0), gated.loop)
    gated.loop.call_soon_threadsafe(core.release.set)
    reply = future.result(timeout=10)
    assert np.frombuffer(reply.raw_output_contents[0], np.float32)[0] == 2.0
    stopping.result(30)


class _CountingProxy:
    """A loopback TCP proxy to ``target`` that counts the bytes the server sends back."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.from_server = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.target)
                threading.Thread(
                    target=self._pipe, args=(client, server, False), daemon=True
                ).start()
                threading.Thread(
                    target=self._pipe, args=(server, client, True), daemon=True
                ).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                if counted:
                    self.from_server += len(data)
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("implementation", BUILT_SERVERS)
def test_infer_responses_are_compressed_when_asked(implementation: str) -> None:
    # The level's algorithm is set on the call before its reply is started (native: also
    # when the loop starts the reply itself, for a lone call; grpcio: only once the initial
    # metadata went out with it): 1 MiB of equal floats goes out as ~1 KiB.
    options = GrpcOptions(port=0, address="127.0.0.1", infer_compression="low")
    for server in serve_grpc(options, core=_GatedCore(), implementation=implementation):
        host, port = server.url.rsplit(":", 1)
        proxy = _CountingProxy((host, int(port)))
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{proxy.port}")
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            reply = stub.ModelInfer(_add_one(rows=16384), timeout=30)
            assert len(reply.raw_output_contents[0]) == 16384 * 16 * 4
            assert proxy.from_server < 64 * 1024, proxy.from_server
            channel.close()
        finally:
            proxy.close()
