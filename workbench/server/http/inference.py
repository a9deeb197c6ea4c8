"""The hot path: ``POST /v2/models/{m}[/versions/{v}]/infer``.

Decompress, decode (JSON, binary tensors or raw binary), run on the core, apply the
classification extension, encode, compress. No per-request validation framework: this is
the path perf_analyzer measures. A request that reads or writes shared memory takes the full
decoder (never the cached plan) and has its outputs copied into their regions before the reply
is encoded; the regions stay in use until then. While tracing is on, a request sampled under
the trace settings takes the same steps with its trace attached (``_traced``).
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.core.contract import ServingCore
from workbench.core.request import InferRequest, InferResponse
from workbench.core.trace import InferenceTrace
from workbench.core.trace_settings import TraceManager
from workbench.errors import UnsupportedError, WorkbenchError
from workbench.server.classification import classify_outputs
from workbench.server.http import compression, tracing
from workbench.server.http.messages import (
    METHOD_NOT_ALLOWED,
    Body,
    Headers,
    HttpRequest,
    Reply,
    error_reply,
)
from workbench.server.http.raw_request import decode_raw_request
from workbench.server.http.request_codec import decode_infer_request, parse_header_length
from workbench.server.http.response_codec import (
    encode_binary_response,
    infer_response_parts,
    reply_body,
)
from workbench.server.shared_memory import SharedMemoryRegistry, write_outputs

_JSON = (b"content-type", b"application/json")
_BINARY = (b"content-type", b"application/octet-stream")
_HEADER_LENGTH = b"inference-header-content-length"


class InferEndpoint:
    """Serves infer requests on one ``InferenceCore``."""

    def __init__(
        self,
        core: ServingCore,
        max_input_bytes: int,
        shared_memory: SharedMemoryRegistry | None = None,
        tracer: TraceManager | None = None,
    ) -> None:
        self.core = core
        self.max_input_bytes = max_input_bytes
        self.shared_memory = shared_memory
        self.tracer = tracer if tracer is not None else TraceManager()

    async def __call__(self, req: HttpRequest, model: str, version: str) -> Reply:
        if req.method != "POST":
            return METHOD_NOT_ALLOWED
        if self.tracer.enabled:
            trace = tracing.sample(self.tracer, model, req)
            if trace is not None:
                return await self._traced(req, model, version, trace)
        encoding, length, accept = _infer_headers(req.headers)
        try:
            config, body, header_length = self._prepare(req, model, version, encoding, length)
        except WorkbenchError as exc:
            return _early_error(exc)
        request, binary_default = self._decode(body, header_length, model, version, config)
        if request.shared_memory is not None:
            return await self._in_shared_memory(request, binary_default, config, accept)
        try:
            response = await self.core.infer(request)
        except WorkbenchError as exc:
            # Triton reports request validation with a JSON type, model failures without one.
            return error_reply(exc, plain=exc.code != "INVALID_ARG")
        return self._encode(request, response, binary_default, config, accept)

    async def _traced(
        self, req: HttpRequest, model: str, version: str, trace: InferenceTrace
    ) -> Reply:
        """The same request, traced; its reply, failures included, carries the trace, which
        the connection writes out once the reply is sent (as Triton does)."""
        encoding, length, accept = _infer_headers(req.headers)
        try:
            config, body, header_length = self._prepare(req, model, version, encoding, length)
        except WorkbenchError as exc:
            return _traced_reply(_early_error(exc), trace)
        try:
            request, binary_default = self._decode(body, header_length, model, version, config)
        except WorkbenchError as exc:
            return _traced_reply(error_reply(exc), trace)
        request.trace = trace
        trace.start()
        if request.shared_memory is not None:
            reply = await self._in_shared_memory(request, binary_default, config, accept)
            tracing.response_complete(trace)
            return _traced_reply(reply, trace)
        try:
            response = await self.core.infer(request)
        except WorkbenchError as exc:
            tracing.response_complete(trace)
            return _traced_reply(error_reply(exc, plain=exc.code != "INVALID_ARG"), trace)
        tracing.response_complete(trace)
        return _traced_reply(self._encode(request, response, binary_default, config, accept), trace)

    def _decode(
        self,
        body: Body,
        header_length: int | None,
        model: str,
        version: str,
        config: ModelConfig,
    ) -> tuple[InferRequest, bool]:
        """The request and whether its outputs default to binary (raw requests: always)."""
        if header_length == 0:
            return decode_raw_request(body, model, version, config), True
        return decode_infer_request(body, header_length, model, version, self.shared_memory)

    def _encode(
        self,
        request: InferRequest,
        response: InferResponse,
        binary_default: bool,
        config: ModelConfig,
        accept: bytes | None,
    ) -> Reply:
        encoded = encode_binary_response(response, request, binary_default)
        if encoded is None:
            if request.output_parameters:  # classes are only ever asked for there
                classify_outputs(self.core, request, response, config.max_batch_size > 0)
            encoded = reply_body(infer_response_parts(response, request, binary_default))
        return _reply(encoded[0], encoded[1], accept)

    async def _in_shared_memory(
        self,
        request: InferRequest,
        binary_default: bool,
        config: ModelConfig,
        accept: bytes | None,
    ) -> Reply:
        """Serve a request with tensors in shared memory; its regions are in use until the
        outputs asked for there are written (a too-small region is the model's failure, as in
        Triton, whose allocator refuses the backend's output)."""
        assert request.shared_memory is not None
        try:
            response = await self.core.infer(request)
            write_outputs(request.shared_memory, response)
        except WorkbenchError as exc:
            return error_reply(exc, plain=exc.code != "INVALID_ARG")
        finally:
            request.shared_memory.release()
        if request.output_parameters:
            classify_outputs(self.core, request, response, config.max_batch_size > 0)
        encoded = reply_body(infer_response_parts(response, request, binary_default))
        return _reply(encoded[0], encoded[1], accept)

    def _prepare(
        self,
        req: HttpRequest,
        model: str,
        version: str,
        encoding: bytes | None,
        length: bytes | None,
    ) -> tuple[ModelConfig, Body, int | None]:
        """Triton's checks before the body is parsed: model, decoupled, encoding, header."""
        config: ModelConfig = self.core.model_config(model, version)
        if config.model_transaction_policy.decoupled:
            raise UnsupportedError(
                "HTTP end point doesn't support models with decoupled transaction policy"
            )
        body = req.body
        if encoding is not None:
            body = compression.decompress(body, encoding, self.max_input_bytes)
        header_length = parse_header_length(length, len(body))
        if header_length is None and not body:
            header_length = 0  # an empty body is a raw request of zero bytes, as in Triton
        return config, body, header_length


def _infer_headers(headers: Headers) -> tuple[bytes | None, bytes | None, bytes | None]:
    """Content-Encoding, Inference-Header-Content-Length and Accept-Encoding: the first of
    each, as ``HttpRequest.header`` finds them (the dict is built in C, last pair first, so
    that the first of a repeated name is the one it keeps)."""
    first = dict(reversed(headers))
    return first.get(b"content-encoding"), first.get(_HEADER_LENGTH), first.get(b"accept-encoding")


def _reply(payload: bytes | list[Any], header_length: int | None, accept: bytes | None) -> Reply:
    """The reply for an encoded response (``payload`` in parts: sent without joining them,
    unless it is to be compressed)."""
    if header_length is None:
        headers = [_JSON]
    else:
        headers = [_BINARY, (_HEADER_LENGTH, b"%d" % header_length)]
    more: tuple[Any, ...] = ()
    if isinstance(payload, list):
        body, more = payload[0], tuple(payload[1:])
    else:
        body = payload
    if accept:
        encoding = compression.response_encoding(accept)
        if encoding != "identity":
            body = compression.compress(b"".join((body, *more)) if more else body, encoding)
            more = ()
            headers.append((b"content-encoding", encoding.encode()))
    return Reply(200, body, headers, more=more)


def _traced_reply(reply: Reply, trace: InferenceTrace) -> Reply:
    reply.trace = trace
    return reply


def _early_error(error: WorkbenchError) -> Reply:
    reply = error_reply(error, plain=True)
    if isinstance(error, UnsupportedError) and "compression" in error.message:
        reply.headers.append((b"accept-encoding", compression.SUPPORTED_ENCODINGS))
    return reply


__all__ = ["InferEndpoint"]
