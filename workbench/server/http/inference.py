"""The hot path: ``POST /v2/models/{m}[/versions/{v}]/infer``.

Decompress, decode (JSON, binary tensors or raw binary), run on the core, apply the
classification extension, encode, compress. No per-request validation framework: this is
the path perf_analyzer measures.
"""

from __future__ import annotations

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.core.inference_core import InferenceCore
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import UnsupportedError, WorkbenchError
from workbench.server.classification import classify_outputs
from workbench.server.http import compression
from workbench.server.http.messages import METHOD_NOT_ALLOWED, HttpRequest, Reply, error_reply
from workbench.server.http.raw_request import decode_raw_request
from workbench.server.http.request_codec import decode_infer_request, parse_header_length
from workbench.server.http.response_codec import encode_infer_response

_JSON = (b"content-type", b"application/json")
_BINARY = (b"content-type", b"application/octet-stream")
_HEADER_LENGTH = b"inference-header-content-length"


class InferEndpoint:
    """Serves infer requests on one ``InferenceCore``."""

    def __init__(self, core: InferenceCore, max_input_bytes: int) -> None:
        self.core = core
        self.max_input_bytes = max_input_bytes

    async def __call__(self, req: HttpRequest, model: str, version: str) -> Reply:
        if req.method != "POST":
            return METHOD_NOT_ALLOWED
        try:
            config, body, header_length = self._prepare(req, model, version)
        except WorkbenchError as exc:
            return _early_error(exc)
        if header_length == 0:
            request, binary_default = decode_raw_request(body, model, version, config), True
        else:
            request, binary_default = decode_infer_request(body, header_length, model, version)
        try:
            response = await self.core.infer(request)
        except WorkbenchError as exc:
            # Triton reports request validation with a JSON type, model failures without one.
            return error_reply(exc, plain=exc.code != "INVALID_ARG")
        self._classify(request, response, config)
        payload, length = encode_infer_response(response, request, binary_default)
        return self._reply(req, payload, length)

    def _prepare(
        self, req: HttpRequest, model: str, version: str
    ) -> tuple[ModelConfig, bytes | bytearray, int | None]:
        """Triton's checks before the body is parsed: model, decoupled, encoding, header."""
        config: ModelConfig = self.core.model_config(model, version)
        if config.model_transaction_policy.decoupled:
            raise UnsupportedError(
                "HTTP end point doesn't support models with decoupled transaction policy"
            )
        encoding = req.header(b"content-encoding")
        body = compression.decompress(req.body, encoding, self.max_input_bytes)
        header_length = parse_header_length(req.header(_HEADER_LENGTH), len(body))
        if header_length is None and not body:
            header_length = 0  # an empty body is a raw request of zero bytes, as in Triton
        return config, body, header_length

    def _classify(
        self, request: InferRequest, response: InferResponse, config: ModelConfig
    ) -> None:
        classify_outputs(self.core, request, response, config.max_batch_size > 0)

    def _reply(self, req: HttpRequest, payload: bytes, header_length: int | None) -> Reply:
        headers = [_JSON] if header_length is None else [_BINARY]
        if header_length is not None:
            headers.append((_HEADER_LENGTH, str(header_length).encode()))
        encoding = compression.response_encoding(req.header(b"accept-encoding"))
        if encoding != "identity":
            payload = compression.compress(payload, encoding)
            headers.append((b"content-encoding", encoding.encode()))
        return Reply(200, payload, headers)


def _early_error(error: WorkbenchError) -> Reply:
    reply = error_reply(error, plain=True)
    if isinstance(error, UnsupportedError) and "compression" in error.message:
        reply.headers.append((b"accept-encoding", compression.SUPPORTED_ENCODINGS))
    return reply


__all__ = ["InferEndpoint"]
