"""The server answering a stub's own calls: BLS (``exec``), decoupled BLS (``exec(decoupled=
True)``, one reply per response) and ``is_model_ready``.

They may take long (the called model runs meanwhile), so ``StubProcess`` hands each one to
the instance's BLS pool (``workbench.threads``) and never serves it on the reading thread.
"""

from __future__ import annotations

from typing import Any

from workbench._types import Tensor
from workbench.backends.base import InferenceClient
from workbench.backends.python._wire_channel import Channel, ChannelClosed, Message
from workbench.backends.python._wire_messages import (
    BLS,
    BLS_STREAM,
    REPLY,
    TraceTable,
    error_to_wire,
)
from workbench.backends.python._wire_shm import BlockWriter, Region, read_block
from workbench.errors import InternalError, WorkbenchError


class StubCalls:
    """Serves the ``BLS``, ``BLS_STREAM`` and ``READY`` calls of one stub process."""

    def __init__(
        self,
        client: InferenceClient | None,
        channel: Channel,
        to_stub: BlockWriter,
        from_stub: Region,
        traces: TraceTable,
    ) -> None:
        self._client = client
        self._channel = channel
        self._to_stub = to_stub
        self._from_stub = from_stub
        #: the stub's traced requests, by trace id (shared with ``StubProcess``)
        self._traces = traces

    def serve(self, message: Message) -> None:
        """Answer one call (on the BLS pool)."""
        try:
            if self._client is None:
                raise InternalError("BLS requests need a running server; none is attached")
            if message[0] == BLS_STREAM:
                self._bls_stream(self._client, message)
                return
            if message[0] == BLS:
                reply = self._bls(self._client, message)
            else:
                _, key, model_name, version = message
                reply = (REPLY, key, self._client.is_model_ready(model_name, version))
        except Exception as exc:
            self.refuse(message, exc)
            return
        self._send(reply)

    def refuse(self, message: Message, error: BaseException) -> None:
        """Answer a call with ``error`` in the shape its caller waits for."""
        reply: Message = (REPLY, message[1], error_to_wire(error), -1, [])
        if message[0] == BLS_STREAM:
            reply = (REPLY, (message[1], 0), error_to_wire(error), -1, [], {}, True)
        elif message[0] != BLS:
            reply = (REPLY, message[1], False)
        self._send(reply)

    def _send(self, reply: Message) -> None:
        try:
            self._channel.send(reply)
        except ChannelClosed:  # the stub is gone; nobody waits for the answer
            pass

    def _call(self, message: Message) -> tuple[str, list[Tensor], dict[str, Any]]:
        """A ``BLS``/``BLS_STREAM`` message as ``InferenceClient`` arguments.

        A call naming a trace id (``trace=request.trace()`` of a traced request still in the
        stub) passes that request's trace: the core traces the call as its child."""
        (_, _, block, model_name, version, descs, requested, parameters, timeout_s, trace_id,
         request_id) = message  # fmt: skip
        options = {
            "model_version": version,
            "requested_outputs": requested,
            "parameters": parameters,
            "timeout_s": timeout_s,
            "trace": self._traces.get(trace_id) if trace_id else None,
            "request_id": request_id,
        }
        return model_name, read_block(self._from_stub, block, descs), options

    def _bls(self, client: InferenceClient, message: Message) -> Message:
        key = message[1]
        model_name, inputs, options = self._call(message)
        try:
            outputs = client.infer_sync(model_name, inputs, **options)
        except WorkbenchError as exc:
            return (REPLY, key, error_to_wire(exc), -1, [])
        out_block, out_descs = self._to_stub.write(outputs)
        return (REPLY, key, None, out_block, out_descs)

    def _bls_stream(self, client: InferenceClient, message: Message) -> None:
        """Send each response of a decoupled BLS call as it comes, under ``(key, n)``."""
        key = message[1]
        model_name, inputs, options = self._call(message)
        responses = client.infer_stream_sync(model_name, inputs, **options)
        n = 0
        try:
            for result, final in responses:
                out_block, out_descs = self._to_stub.write(result.outputs)
                error = error_to_wire(result.error)
                reply = (REPLY, (key, n), error, out_block, out_descs, result.parameters, final)
                self._channel.send(reply)
                n += 1
        except ChannelClosed:
            return
        except Exception as exc:  # the stream ends here; the model hears why
            self._send((REPLY, (key, n), error_to_wire(exc), -1, [], {}, True))
