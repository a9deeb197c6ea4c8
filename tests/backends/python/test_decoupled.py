"""Decoupled python models: responses through ``ExecRequest.respond``, in both modes."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.backends.model_folders import context_for, request, write_model
from workbench.backends.base import ExecResult
from workbench.backends.python import PythonBackend
from workbench.core.request import InferRequest
from workbench.errors import InternalError

IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'

PBTXT = """
backend: "python"
input { name: "COUNT" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_INT32 dims: [1] }
model_transaction_policy { decoupled: true }
"""

#: COUNT = n -> n responses OUT = [i] (+ a base), then the final flag, in ways set by ``mode``
MODEL = """
import json
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def out(value):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32))])


def stream(request, sender, pause):
    count = pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()
    for i in range(int(count[0]) % 100):
        time.sleep(pause)
        # the input is read again here, after execute returned
        sender.send(out(int(count[0]) // 100 * 100 + i))
    sender.send(flags=FINAL)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "")
            sender = request.get_response_sender()
            if mode == "exit":
                os._exit(1)
            if mode == "raise":
                raise ValueError("broken")
            if mode == "return":
                return [out(1) for _ in requests]
            if mode == "thread":
                threading.Thread(target=stream, args=(request, sender, 0.05)).start()
            elif mode == "stall":  # one response, then a long pause before the rest
                sender.send(out(-1))
                threading.Thread(target=stream, args=(request, sender, 30)).start()
            else:
                stream(request, sender, 0)
            if mode == "twice":
                try:
                    sender.send(out(99))
                except pb_utils.TritonModelException as exc:
                    pb_utils.Logger.log_error(f"refused: {exc}")
        return None
"""

ASYNC_MODEL = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0.2)  # Triton does not wait for a decoupled coroutine
        for request in requests:
            sender = request.get_response_sender()
            seven = pb_utils.Tensor("OUT", np.array([7], np.int32))
            sender.send(pb_utils.InferenceResponse([seven]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
"""

MODES = pytest.mark.parametrize("in_process", [False, True], ids=["process", "in_process"])


class Stream:
    """Collects ``respond(result, final)`` calls, as the core's stream would."""

    def __init__(self) -> None:
        self.items: list[tuple[ExecResult | None, bool]] = []
        self.done = threading.Event()

    def __call__(self, result: ExecResult | None, final: bool) -> None:
        self.items.append((result, final))
        if final:
            self.done.set()

    def values(self) -> list[int | None]:
        """OUT of each response (None for the bare final flag)."""
        assert self.done.wait(20), "the stream never ended"
        return [None if r is None else int(r.outputs[0].array[0]) for r, _ in self.items]

    def error(self) -> str:
        assert self.done.wait(20), "the stream never ended"
        result, final = self.items[-1]
        assert final and result is not None and isinstance(result.error, InternalError)
        return result.error.message


def _instance(repo: Path, made: list[Any], in_process: bool, model: str = MODEL) -> Any:
    pbtxt = PBTXT + (IN_PROCESS if in_process else "")
    folder = write_model(repo, "repeat", pbtxt, {"1/model.py": model})
    instance = PythonBackend().create_instance(context_for(folder))
    made.append(instance)
    return instance


def _streaming(count: int, **parameters: Any) -> tuple[InferRequest, Stream]:
    stream = Stream()
    req = request({"COUNT": np.array([count], np.int32)}, **parameters)
    req.respond = stream
    return req, stream


@MODES
def test_several_responses_then_the_final_flag(
    repo: Path, instances: list[Any], in_process: bool
) -> None:
    instance = _instance(repo, instances, in_process)
    first, stream = _streaming(3)
    second, other = _streaming(1)
    results = instance.execute([first, second])
    assert [r.error for r in results] == [None, None]  # placeholders: the core ignores them
    assert stream.values() == [0, 1, 2, None]
    assert [final for _, final in stream.items] == [False, False, False, True]
    assert other.values() == [0, None]


@MODES
def test_responses_from_a_thread_after_execute_returned(
    repo: Path, instances: list[Any], in_process: bool
) -> None:
    instance = _instance(repo, instances, in_process)
    first, one = _streaming(103, mode="thread")  # 3 responses from base 100
    second, two = _streaming(202, mode="thread")
    instance.execute([first])
    instance.execute([second])  # runs while the first stream is still sending
    assert one.values() == [100, 101, 102, None]
    assert two.values() == [200, 201, None]


@MODES
def test_async_execute_is_not_awaited(repo: Path, instances: list[Any], in_process: bool) -> None:
    instance = _instance(repo, instances, in_process, ASYNC_MODEL)
    req, stream = _streaming(1)
    instance.execute([req])
    assert not stream.done.is_set()
    assert stream.values() == [7, None]


@MODES
def test_execute_must_return_none(repo: Path, instances: list[Any], in_process: bool) -> None:
    instance = _instance(repo, instances, in_process)
    req, stream = _streaming(1, mode="return")
    instance.execute([req])
    assert stream.error() == (
        "Failed to process the request(s) for model 'repeat_0_0', message: Python model "
        "'repeat_0_0' "
        "is using the decoupled mode and the execute function must return None."
    )
    assert len(stream.items) == 1


@MODES
def test_an_exception_ends_only_the_open_streams(
    repo: Path, instances: list[Any], in_process: bool
) -> None:
    instance = _instance(repo, instances, in_process)
    done, finished = _streaming(1)
    failing, failed = _streaming(1, mode="raise")
    instance.execute([done, failing])
    assert finished.values() == [0, None]  # already closed: nothing more
    assert "message: ValueError: broken" in failed.error()


@MODES
def test_sending_after_the_final_flag_raises(
    repo: Path, instances: list[Any], in_process: bool, caplog: pytest.LogCaptureFixture
) -> None:
    instance = _instance(repo, instances, in_process)
    req, stream = _streaming(1, mode="twice")
    with caplog.at_level(logging.ERROR, logger="workbench.python_model"):
        instance.execute([req])
    assert stream.values() == [0, None]
    messages = [r.getMessage() for r in caplog.records if r.name == "workbench.python_model"]
    assert messages == ["refused: Unable to send response. Response sender has been closed."]


def test_a_crash_ends_every_open_stream_then_the_stub_restarts(
    repo: Path, instances: list[Any]
) -> None:
    instance = _instance(repo, instances, in_process=False)
    earlier, stalled = _streaming(2, mode="stall")
    instance.execute([earlier])
    crashing, crashed = _streaming(1, mode="exit")
    instance.execute([crashing])
    unhealthy = (
        "Failed to process the request(s) for model instance 'repeat_0_0', "
        "message: Stub process 'repeat_0_0' is not healthy."
    )
    assert stalled.error() == unhealthy and stalled.items[0][0] is not None
    assert crashed.error() == unhealthy
    later, stream = _streaming(2)
    instance.execute([later])
    assert stream.values() == [0, 1, None]


SINGLE_PBTXT = """
backend: "python"
input { name: "COUNT" data_type: TYPE_INT32 dims: [1] }
output { name: "OUT" data_type: TYPE_INT32 dims: [1] }
"""

FINAL_FIRST = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            request.get_response_sender().send(
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
            )
"""


def test_a_non_decoupled_model_cannot_send_only_the_final_flag(
    repo: Path, instances: list[Any]
) -> None:
    folder = write_model(repo, "single", SINGLE_PBTXT, {"1/model.py": FINAL_FIRST})
    instance = PythonBackend().create_instance(context_for(folder))
    instances.append(instance)
    [result] = instance.execute([request({"COUNT": np.array([1], np.int32)})])
    assert isinstance(result.error, InternalError)
    assert "Non-decoupled model cannot send complete final before sending a response" in str(
        result.error
    )
