"""Requests whose bytes are not the RPC's protobuf message get Triton's answer.

tritonserver 2.51 answers such a call with ``INTERNAL`` "Unable to parse request" (checked
side by side in ``tests/security/test_bad_requests.py``). grpc.aio, when a deserializer raises,
answers ``UNKNOWN`` "Unexpected <class '...DecodeError'>: Error parsing message" instead. So the
service is registered with deserializers that turn a ``DecodeError`` into a marker, and each
unary behaviour answers the marker with Triton's status before the servicer sees it.

The same registration lets a unary behaviour answer with bytes it serialised itself
(``ModelInfer``: one copy of each output instead of protobuf's three), and lets ``ModelInfer``
read its request with its own deserializer (``raw_inputs.py``: the input tensors stay in the
bytes grpc received instead of being copied twice by protobuf).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2_grpc

from workbench.server.grpc.raw_inputs import parse_infer_request

SERVICE = "inference.GRPCInferenceService"
UNPARSABLE_MESSAGE = "Unable to parse request"
#: what a deserializer returns for bytes that are not its message
UNPARSABLE = object()
#: requests read by a deserializer of ours rather than the message's own ``FromString``
_DESERIALIZERS: dict[str, Callable[[bytes], Any]] = {"ModelInfer": parse_infer_request}


class _Capture:
    """Stands in for the server while the generated code registers its handlers."""

    def __init__(self) -> None:
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, _handlers: object) -> None:
        pass

    def add_registered_method_handlers(self, _service: str, handlers: dict[str, Any]) -> None:
        self.handlers = dict(handlers)


def add_service(
    servicer: service_pb2_grpc.GRPCInferenceServiceServicer, server: Any, *, compressing: bool
) -> None:
    """``add_GRPCInferenceServiceServicer_to_server``, answering unparsable requests as Triton.

    ``compressing``: ``ModelInfer`` sets a compression algorithm on its calls. grpc.aio applies
    it to a unary reply only when the initial metadata announcing it went out before the reply
    (its own finish sends them without), so here they are sent once the servicer has set it.
    """
    handlers = _handlers(servicer, native=False, compressing=compressing)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)


def method_handlers(
    servicer: service_pb2_grpc.GRPCInferenceServiceServicer,
) -> dict[str, grpc.RpcMethodHandler]:
    """The handlers ``add_service`` registers, by full method path (``/<service>/<rpc>``),
    for the native front end: a unary one is given ``UNPARSABLE`` as it is (the front end
    answers it before calling the handler: one coroutine less per call), and a response
    serialised in parts stays in parts (the front end sends them unjoined)."""
    handlers = _handlers(servicer, native=True, compressing=False)
    return {f"/{SERVICE}/{name}": handler for name, handler in handlers.items()}


def _handlers(
    servicer: service_pb2_grpc.GRPCInferenceServiceServicer, *, native: bool, compressing: bool
) -> dict[str, grpc.RpcMethodHandler]:
    capture = _Capture()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, capture)
    return {
        name: _guarded(name, handler, native, compressing and name == "ModelInfer")
        for name, handler in capture.handlers.items()
    }


def _guarded(name: str, handler: Any, native: bool, announce: bool) -> Any:
    if handler.unary_unary is None:  # streams: grpc's own answer (not compared with Triton)
        return handler
    deserialize = _DESERIALIZERS.get(name, handler.request_deserializer)
    behavior = handler.unary_unary
    return handler._replace(
        request_deserializer=_tolerant(deserialize),
        response_serializer=(_passing_parts if native else _passing_bytes)(
            handler.response_serializer
        ),
        unary_unary=behavior if native else _answering_unparsable(behavior, announce),
    )


def _passing_bytes(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """The serializer, except that a response already serialised (``ModelInfer``'s, see
    ``response_codec.serialize_response_parts``) goes out as it is, its parts joined."""

    def serialized(message: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        return b"".join(message) if isinstance(message, list) else serialize(message)

    return serialized


def _passing_parts(serialize: Callable[[Any], bytes]) -> Callable[[Any], Any]:
    """``_passing_bytes`` for a server that sends a message's parts unjoined (the native one)."""

    def serialized(message: Any) -> Any:
        return message if isinstance(message, (bytes, list)) else serialize(message)

    return serialized


def _tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError:
            return UNPARSABLE

    return parse


def _answering_unparsable(behavior: Callable[..., Any], announce: bool) -> Callable[..., Any]:
    """grpc.aio's unary behaviour: Triton's answer to ``UNPARSABLE``; with ``announce``, the
    initial metadata (and with them the call's compression) sent before the reply."""

    async def answer(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request is UNPARSABLE:
            await context.abort(grpc.StatusCode.INTERNAL, UNPARSABLE_MESSAGE)
        result = behavior(request, context)
        reply = await result if inspect.isawaitable(result) else result
        if announce:
            await context.send_initial_metadata(())
        return reply

    return answer


__all__ = ["UNPARSABLE", "UNPARSABLE_MESSAGE", "add_service", "method_handlers"]
