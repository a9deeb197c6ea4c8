"""The stub process of one Python-backend model instance (Triton's ``triton_python_backend_stub``).

The server runs this module (``python -c`` with ``_server_stub._BOOT``, which keeps the working
directory off ``sys.path``) with arguments ``SOCKET_FD TO_STUB_FD FROM_STUB_FD``, three
inherited descriptors: a connected socket for control messages and the two
shared-memory regions. The stub imports ``model.py`` through the ``pb_utils`` shim, runs
``initialize``, then serves ``execute`` calls one at a time on its main thread until
``finalize`` or until the server goes away (EOF on the socket). Responses of decoupled models,
BLS calls and log records may leave from any thread the model starts.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

from workbench import shared_buffers, threads
from workbench._types import Parameters, Tensor
from workbench.backends.base import ExecResult, RequestTrace
from workbench.backends.python import pb_utils
from workbench.backends.python._model_loader import load_module
from workbench.backends.python._model_metrics import install_sink
from workbench.backends.python._model_runner import ModelRunner, ModelSpec
from workbench.backends.python._stub_metrics import MetricForwarder
from workbench.backends.python._stub_requests import ResponseWriter, failed_wires, read_pb_requests
from workbench.backends.python._wire_channel import Channel, ChannelClosed, Message
from workbench.backends.python._wire_messages import (
    BLS,
    BLS_STREAM,
    EXECUTE,
    FINALIZE,
    INIT,
    LOG,
    METRICS,
    READY,
    REPLY,
    RESPONSE,
    RequestWire,
    StubRequest,
    error_from_wire,
    error_to_wire,
    read_requests,
    write_results,
)
from workbench.backends.python._wire_shm import BlockWriter, Region, read_block
from workbench.errors import InternalError, WorkbenchError

_log = logging.getLogger(__name__)


class StubClient:
    """BLS from the stub: each call goes to the server; tensors cross in shared memory."""

    def __init__(self, stub: Stub) -> None:
        self._stub = stub

    def _send(
        self,
        kind: int,
        model_name: str,
        inputs: Sequence[Tensor],
        model_version: int,
        requested_outputs: Sequence[str] | None,
        parameters: Parameters | None,
        timeout_s: float | None,
        trace: RequestTrace | None,
        request_id: str,
    ) -> int:
        """Send a BLS call (``BLS`` or ``BLS_STREAM``), its inputs in shared memory; its key."""
        stub = self._stub
        key = stub.new_key()
        block, descs = stub.writer.write(list(inputs))
        requested = list(requested_outputs) if requested_outputs else None
        trace_id = 0 if trace is None else trace.id
        call = (kind, key, block, model_name, model_version, descs, requested, parameters)
        stub.channel.send((*call, timeout_s, trace_id, request_id))
        return key

    def infer_sync(
        self,
        model_name: str,
        inputs: Sequence[Tensor],
        *,
        model_version: int = -1,
        requested_outputs: Sequence[str] | None = None,
        parameters: Parameters | None = None,
        timeout_s: float | None = None,
        trace: RequestTrace | None = None,
        request_id: str = "",
    ) -> list[Tensor]:
        """Run an inference on the server; raises the server's ``WorkbenchError``."""
        stub = self._stub
        key = self._send(
            BLS,
            model_name,
            inputs,
            model_version,
            requested_outputs,
            parameters,
            timeout_s,
            trace,
            request_id,
        )
        _, _, error, out_block, out_descs = stub.channel.wait(key)
        failure = error_from_wire(error)
        if failure is not None:
            raise failure
        return read_block(stub.inbound, out_block, out_descs)

    def infer_stream_sync(
        self,
        model_name: str,
        inputs: Sequence[Tensor],
        *,
        model_version: int = -1,
        requested_outputs: Sequence[str] | None = None,
        parameters: Parameters | None = None,
        timeout_s: float | None = None,
        trace: RequestTrace | None = None,
        request_id: str = "",
    ) -> Iterator[tuple[ExecResult, bool]]:
        """Every response of a decoupled BLS call, as the server sends them (``BLS_STREAM``)."""
        stub = self._stub
        key = self._send(
            BLS_STREAM,
            model_name,
            inputs,
            model_version,
            requested_outputs,
            parameters,
            timeout_s,
            trace,
            request_id,
        )
        for n in itertools.count():
            _, _, error, out_block, out_descs, params, final = stub.channel.wait((key, n))
            outputs = read_block(stub.inbound, out_block, out_descs)
            try:
                yield ExecResult(outputs, error_from_wire(error), params), final
            except GeneratorExit:
                if not final:
                    self._drain(key, n + 1)
                raise
            if final:
                return

    def _drain(self, key: int, n: int) -> None:
        """Read the rest of an abandoned stream (its shared memory freed), as Triton's
        response iterator drains itself when it is destroyed."""
        final = False
        while not final:
            _, _, _, out_block, out_descs, _, final = self._stub.channel.wait((key, n))
            read_block(self._stub.inbound, out_block, out_descs)
            n += 1

    def is_model_ready(self, model_name: str, model_version: int = -1) -> bool:
        """Whether the server has ``model_name`` loaded and ready."""
        key = self._stub.new_key()
        self._stub.channel.send((READY, key, model_name, model_version))
        return bool(self._stub.channel.wait(key)[2])


class _LogForwarder(logging.Handler):
    """Sends every record to the server, which logs it under the same logger name."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self._channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            self._channel.send((LOG, None, record.levelno, record.name, text))
        except Exception:  # a log record must never break the model
            pass


class Stub:
    """The stub's side of the connection and the model it runs."""

    def __init__(self, sock: socket.socket, inbound: Region, outbound: Region) -> None:
        self.inbound = inbound
        self.writer = BlockWriter(outbound)
        self.channel = Channel(sock, self._route)
        #: custom metric operations, sent with the next reply (or by its flusher thread)
        self.metrics = MetricForwarder()
        self.runner: ModelRunner | None = None
        self._responses: ResponseWriter | None = None
        self._keys = itertools.count(1)
        #: commands are filed under -1, -2, ... (calls into the server under 1, 2, ...)
        self._commands = itertools.count(1)

    def new_key(self) -> int:
        """A key for a call into the server (replies come back under it)."""
        return next(self._keys)

    def _route(self, message: Message) -> Hashable | None:
        kind = message[0]
        if kind == REPLY:
            return message[1]
        if kind in (INIT, EXECUTE, FINALIZE):
            # Only the reading thread routes, so the numbering is in arrival order.
            return -next(self._commands)
        return None

    def reply(self, message: Message) -> None:
        """Send a reply, preceded in the same write by the metric updates made so far."""
        if self.metrics.settled:  # the usual case: a model without custom metrics
            self.channel.send(message)
            return
        self.metrics.send_with(
            lambda operations: self.channel.send_all(
                [(METRICS, None, operations), message] if operations else [message]
            )
        )

    def send_metrics(self, operations: list[Any]) -> None:
        self.channel.send((METRICS, None, operations))

    def serve(self) -> None:
        """Initialize, then run commands until ``finalize``; returns when done."""
        handlers = {INIT: self._initialize, EXECUTE: self._execute, FINALIZE: self._finalize}
        wait = self.channel.wait
        for index in itertools.count(1):
            message = wait(-index)
            if not handlers[message[0]](message):
                return

    def _initialize(self, message: Message) -> bool:
        """Load the model and run its ``initialize``; whether to go on serving."""
        _, key, setup = message
        try:
            sys.path.extend(p for p in setup["sys_path"] if p not in sys.path)
            spec = ModelSpec(**setup["spec"])
            model_file = Path(setup["model_file"])
            module = load_module(spec.name, model_file)
            client = StubClient(self) if setup["client"] else None
            scope = pb_utils._ModelScope(str(model_file.parent), client)
            pb_utils._process_scope = scope
            # The process scope serves every thread: no context variable to set per call.
            self.runner = ModelRunner(spec, module, scope, per_call_scope=False)
            self.runner.initialize(setup["args"])
            self._responses = ResponseWriter(spec)
        except Exception as exc:
            self.reply((REPLY, key, error_to_wire(exc)))
            return False
        self.reply((REPLY, key, None, shared_buffers.can_map(setup.get("shared_probe"))))
        return True

    def _execute(self, message: Message) -> bool:
        """Run one ``execute`` and reply with every response (decoupled: once it returned)."""
        _, key, block, wires = message
        runner = self.runner
        assert runner is not None
        if runner.spec.decoupled:
            self._execute_decoupled(runner, message)
            return True
        try:
            requests = read_pb_requests(self.inbound, block, wires, runner.spec.outputs)
        except (OSError, ValueError) as exc:  # a request body the server shared, unmappable
            error = InternalError(f"failed to read the request's inputs: {exc}")
            self.reply((REPLY, key, -1, failed_wires(len(wires), error)))
            return True
        try:
            responses = runner.run(requests)
        except WorkbenchError as exc:
            self.reply((REPLY, key, -1, failed_wires(len(wires), exc)))
            return True
        del requests  # inputs read in place go back to the server as soon as they can
        self._reply_with(key, responses, wires)
        return True

    def _reply_with(self, key: int, responses: list[Any], wires: list[RequestWire]) -> None:
        """Reply with the model's responses, their outputs in one block."""
        writer = self._responses
        assert writer is not None
        out_block = -1
        try:
            out_block, results = writer.write(self.writer, responses, wires)
            self.reply((REPLY, key, out_block, results))
        except ChannelClosed:
            raise
        except Exception as exc:  # e.g. response parameters that cannot be pickled
            self.writer.region.free(out_block)
            error = InternalError(f"failed to return the responses: {type(exc).__name__}: {exc}")
            self.reply((REPLY, key, -1, failed_wires(len(wires), error)))

    def _execute_decoupled(self, runner: ModelRunner, message: Message) -> None:
        _, key, block, wires = message
        requests = read_requests(self.inbound, block, wires)
        for request in requests:
            request.respond = self._responder(request)
        runner.execute(requests)
        self.reply((REPLY, key, -1, []))

    def _responder(self, request: StubRequest) -> Any:
        token = request.token

        def respond(result: ExecResult | None, final: bool) -> None:
            block, [wire] = write_results(self.writer, [result])
            self.channel.send((RESPONSE, token, final, block, wire))

        return respond

    def _finalize(self, message: Message) -> bool:
        if self.runner is not None:
            self.runner.finalize()
            self.runner.discard()
        self.metrics.stop()
        self.reply((REPLY, message[1]))
        return False


def _forward_logs(channel: Channel) -> None:
    """Forward ``pb_utils.Logger`` (every level) and other loggers (WARNING and up)."""
    logging.getLogger().addHandler(_LogForwarder(channel))
    logging.getLogger("workbench.python_model").setLevel(logging.DEBUG)


def _exit_with_the_server(server_pid: int) -> None:
    """Exit once the server is gone, even while ``execute`` or ``finalize`` hangs: a server
    killed outright (SIGKILL, a kernel restart) leaves no stub behind. Triton's stub checks
    its parent every 300 ms the same way (``pb_stub.cc``, "Non-graceful termination")."""
    while os.getppid() == server_pid:
        time.sleep(0.3)
    print("Non-graceful termination detected.", file=sys.stderr, flush=True)
    os._exit(1)


def _ignore(signum: int, frame: object) -> None:
    """SIGINT and SIGTERM: the server decides when a stub stops (Triton's stub ignores both,
    ``SignalHandler`` in ``pb_stub.cc``). A handler rather than SIG_IGN, so that processes the
    model starts can still be stopped with them."""


def main(argv: Sequence[str]) -> int:
    """Run the stub; returns the exit status."""
    sock_fd, inbound_fd, outbound_fd = (int(arg) for arg in argv[:3])
    # Ctrl-C in a terminal, or a service manager's SIGTERM, reaches the whole process group
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _ignore)
    threads.start("server-watch", _exit_with_the_server, os.getppid())
    for fd in (sock_fd, inbound_fd, outbound_fd):
        os.set_inheritable(fd, False)
    stub = Stub(socket.socket(fileno=sock_fd), Region(inbound_fd), Region(outbound_fd))
    _forward_logs(stub.channel)
    install_sink(stub.metrics)
    stub.metrics.start_flusher(stub.send_metrics)
    try:
        stub.serve()
    except ChannelClosed:
        pass  # the server went away: nothing left to serve
    return 0


if __name__ == "__main__":
    try:
        status = main(sys.argv[1:])
    except BaseException:  # sys.exit() in model code, or a bug: the server sees us die
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Threads the model started must not keep the process alive (Triton's stub exits too).
    os._exit(status)
