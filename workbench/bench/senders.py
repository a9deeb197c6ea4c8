"""One inference request, encoded once and sent again and again: the load of a sweep.

A sweep's load generator shares the machine with the server it measures (the embedded server,
or a tritonserver started beside the notebook). tritonclient's aio clients rebuild the same
request and decode every answer: measured on the sweep-transfer benchmark (2 cores, FP32[16]),
the worker process spent 420-600 µs of CPU per inference, more than either server's front end
(250-490 µs), so a sweep there measured the client's share of two cores as much as the model's
settings. perf_analyzer, whose numbers users compare with, builds its request once.

So do these senders. The request bytes come from tritonclient's own encoder (HTTP) or from
Triton's generated protobuf classes (gRPC), once; each send then writes those bytes and reads
only the answer's status, its body kept for an error message:

- ``HttpSender``: keep-alive connections of its own, answers parsed by httptools (the parser
  our server uses), one request at a time per connection (as tritonclient and perf_analyzer);
- ``GrpcSender``: ``ModelInfer`` through grpc.aio with the request serialized in advance and
  the reply left unparsed.

A failure raises tritonclient's ``InferenceServerException`` with the message tritonclient
would give (the ``error`` of Triton's JSON body; the gRPC status details), so a sweep row's
``error`` reads the same as before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

import httptools
import numpy as np

#: gRPC's per-message limits, lifted as tritonclient lifts them (large tensors are legal)
_GRPC_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
_MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def _failure(message: str, status: str) -> Exception:
    from tritonclient.utils import InferenceServerException

    return InferenceServerException(msg=message, status=status)


def _host_port(url: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too), as tritonclient's ``url`` takes it."""
    address = url.split("://", 1)[-1].rstrip("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected host:port, got {url!r}")
    return host.strip("[]"), int(port)


def infer_path(model: str, version: str) -> str:
    """The KServe v2 infer path of ``model`` (at ``version``, when one is given)."""
    versioned = f"/versions/{quote(version)}" if version else ""
    return f"/v2/models/{quote(model)}{versioned}/infer"


# -- HTTP ------------------------------------------------------------------------------------------


class _HttpConnection(asyncio.Protocol):
    """One keep-alive connection: write a request, wait for its whole answer."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self._status = 0
        self._error_body: list[bytes] = []
        self.open = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not derive from asyncio's classes: no isinstance check
        self._transport = cast(asyncio.Transport, transport)

    def exchange(self, request: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self._transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(request)
        return self._waiter

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"the server's answer is not HTTP: {exc}"))

    # httptools' callbacks
    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        self._error_body.clear()

    def on_body(self, body: bytes) -> None:
        if self._status != 200:  # a success's body is not read: only failures need it
            self._error_body.append(body)

    def on_message_complete(self) -> None:
        if not self._parser.should_keep_alive():
            self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((self._status, b"".join(self._error_body)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        self._fail(ConnectionError(f"the server closed the connection: {exc or 'EOF'}"))

    def _fail(self, error: Exception) -> None:
        self.close()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    def close(self) -> None:
        self.open = False
        if self._transport is not None:
            self._transport.close()


def http_error_message(status: int, body: bytes) -> str:
    """What tritonclient says for a failed HTTP inference: the ``error`` of Triton's JSON."""
    try:
        found = json.loads(body)
    except ValueError:
        found = None
    if isinstance(found, dict) and isinstance(found.get("error"), str):
        return str(found["error"])
    return body.decode("utf-8", "replace").strip() or f"HTTP {status}"


class HttpSender:
    """``POST .../infer`` with the binary tensor extension, the body encoded once."""

    def __init__(
        self,
        url: str,
        model: str,
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        version: str = "",
    ) -> None:
        import tritonclient.http as http

        self._host, self._port = _host_port(url)
        body, json_size = http.InferenceServerClient.generate_request_body(inputs, outputs)
        lines = [
            f"POST {infer_path(model, version)} HTTP/1.1",
            f"Host: {f'[{self._host}]' if ':' in self._host else self._host}:{self._port}",
            f"Content-Length: {len(body)}",
        ]
        if json_size is not None:
            lines.append(f"Inference-Header-Content-Length: {json_size}")
        self.request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + bytes(body)
        self._idle: list[_HttpConnection] = []
        self._connections: set[_HttpConnection] = set()

    async def __call__(self) -> None:
        connection = await self._connection()
        try:
            status, body = await connection.exchange(self.request)
        except BaseException:  # failed, or cancelled with its answer still to come: not reused
            connection.close()
            self._connections.discard(connection)
            raise
        if connection.open:
            self._idle.append(connection)
        else:
            self._connections.discard(connection)
        if status != 200:
            raise _failure(http_error_message(status, body), str(status))

    async def _connection(self) -> _HttpConnection:
        while self._idle:
            connection = self._idle.pop()
            if connection.open:
                return connection
            self._connections.discard(connection)
        loop = asyncio.get_running_loop()
        try:
            _, connection = await loop.create_connection(_HttpConnection, self._host, self._port)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ConnectionError(f"cannot connect to {self._host}:{self._port}: {reason}") from exc
        self._connections.add(connection)
        return connection

    async def close(self) -> None:
        for connection in self._connections:
            connection.close()
        self._connections.clear()
        self._idle.clear()


# -- gRPC ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InferCall:
    """The one request a load sends: ``model`` (``version``: "" for its policy's choice) with
    ``arrays`` by input name in Triton's ``datatypes``, asking for ``outputs``."""

    model: str
    arrays: Mapping[str, np.ndarray]
    datatypes: Mapping[str, str]
    outputs: Sequence[str]
    version: str = ""

    def wire_arrays(self) -> dict[str, np.ndarray]:
        """The arrays as the wire carries them: each datatype's numpy type, contiguous;
        BYTES as an object array of ``bytes`` (a ``str`` encoded as UTF-8)."""
        return {name: _wire_array(a, self.datatypes[name]) for name, a in self.arrays.items()}


def _wire_array(array: np.ndarray, datatype: str) -> np.ndarray:
    if datatype != "BYTES":
        from workbench.config.dtypes import numpy_dtype

        return np.ascontiguousarray(array, dtype=numpy_dtype(datatype))
    flat = [v.encode("utf-8") if isinstance(v, str) else v for v in array.reshape(-1)]
    return np.array(flat, dtype=np.object_).reshape(array.shape)


def model_infer_request(call: InferCall) -> bytes:
    """A serialized ``ModelInferRequest`` carrying ``call``'s arrays in ``raw_input_contents``."""
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import serialize_byte_tensor

    request = service_pb2.ModelInferRequest(model_name=call.model, model_version=call.version)
    for name, array in call.wire_arrays().items():
        datatype = call.datatypes[name]
        request.inputs.add(name=name, datatype=datatype, shape=list(array.shape))
        if datatype == "BYTES":
            serialized = serialize_byte_tensor(array)
            raw = serialized.item() if serialized.size else b""
        else:
            raw = array.tobytes()
        request.raw_input_contents.append(raw)
    for name in call.outputs:
        request.outputs.add(name=name)
    return bytes(request.SerializeToString())


class GrpcSender:
    """``ModelInfer`` with a request serialized once; the reply is not parsed."""

    def __init__(self, url: str, request: bytes) -> None:
        self.url = url
        self.request = request
        self._channel: Any = None
        self._infer: Any = None

    async def __call__(self) -> None:
        import grpc

        if self._infer is None:  # grpc.aio's channel belongs to the loop it is made on
            self._channel = grpc.aio.insecure_channel(self.url, options=_GRPC_OPTIONS)
            # no serializers: the request goes out as these bytes, the reply comes back as bytes
            self._infer = self._channel.unary_unary(_MODEL_INFER)
        try:
            await self._infer(self.request)
        except grpc.aio.AioRpcError as exc:
            raise _failure(exc.details() or "", str(exc.code())) from None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._infer = None


__all__ = [
    "GrpcSender",
    "HttpSender",
    "http_error_message",
    "infer_path",
    "model_infer_request",
]
