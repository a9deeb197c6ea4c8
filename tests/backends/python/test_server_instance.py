"""Python-backend instances as stub processes: isolation, parallelism, crashes, BLS, closing."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.backends.model_folders import context_for, load_config, request, write_model
from tests.backends.python.fakes import FakeClient
from workbench import shared_buffers
from workbench._types import Tensor
from workbench.backends.python import (
    ProcessModelInstance,
    PythonBackend,
    PythonModelInstance,
    _server_stub,
)
from workbench.errors import InternalError

IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'

PBTXT = """
backend: "python"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: [-1] }
output { name: "Y" data_type: TYPE_FP32 dims: [-1] }
output { name: "PID" data_type: TYPE_INT64 dims: [1] }
"""

#: X + 1, the stub's pid, and on request a crash, a CPU-bound loop, a hang or a ping-pong
MODEL = """
import ctypes
import json
import mmap
import os
import resource
import signal
import time

import numpy as np
import triton_python_backend_utils as pb_utils

STARTS = []


class TritonPythonModel:
    def initialize(self, args):
        STARTS.append(os.getpid())

    def execute(self, requests):
        mode = requests[0].parameters()
        if '"ping_pong"' in mode:  # first: its board's path could hold any other mode's word
            return ping_pong(json.loads(mode))
        if "exit" in mode:
            os._exit(1)
        if "segfault" in mode:
            ctypes.string_at(0)
        if "kill" in mode:
            os.kill(os.getpid(), signal.SIGKILL)
        if "hang" in mode:
            time.sleep(600)
        if "spin" in mode:
            total = 0
            for i in range(SPIN):
                total += i % 7
        if "log" in mode:
            pb_utils.Logger.log_warn("a warning from the stub")
        pid = np.array([os.getpid()], dtype=np.int64)
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1),
                pb_utils.Tensor("PID", pid),
            ])
            for r in requests
        ]

    def finalize(self):
        if os.environ.get("WORKBENCH_TEST_HANG_FINALIZE"):
            time.sleep(600)


def ping_pong(params):
    # Spin (never sleep) until the shared byte says it is our turn, hand the turn back, and
    # count this thread's context switches from our second turn on: by then both players
    # are in, so waiting for the other to start is not counted.
    with open(params["board"], "r+b") as board:
        shared = mmap.mmap(board.fileno(), 1)
    role, turns, deadline = params["role"], 0, time.monotonic() + 30
    before = resource.getrusage(resource.RUSAGE_THREAD)
    while turns < params["turns"] and time.monotonic() < deadline:
        if shared[0] == role:
            shared[0] = 1 - role
            turns += 1
            if turns == 2:
                before = resource.getrusage(resource.RUSAGE_THREAD)
    after = resource.getrusage(resource.RUSAGE_THREAD)
    switches = after.ru_nvcsw + after.ru_nivcsw - before.ru_nvcsw - before.ru_nivcsw
    seen = np.array([turns, switches], dtype=np.float32)
    pid = np.array([os.getpid()], dtype=np.int64)
    return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", seen), pb_utils.Tensor("PID", pid)])]
"""

SPIN_LOOPS = 3_000_000
#: turns each instance takes in the ping-pong: ~0.1 s on two cores, minutes on one
PING_PONG = 20_000


def _make(repo: Path, made: list[Any], name: str = "m", pbtxt: str = PBTXT, **kwargs: Any) -> Any:
    folder = repo / name
    if not folder.exists():
        write_model(repo, name, pbtxt, {"1/model.py": MODEL.replace("SPIN", str(SPIN_LOOPS))})
    instance = PythonBackend().create_instance(context_for(folder, **kwargs))
    made.append(instance)
    return instance


def _x(*values: float) -> dict[str, np.ndarray]:
    return {"X": np.array(values, dtype=np.float32)}


def _pid(result: Any) -> int:
    assert result.error is None, result.error
    return int({t.name: t for t in result.outputs}["PID"].array[0])


def test_process_mode_is_the_default(repo: Path, instances: list[Any]) -> None:
    instance = _make(repo, instances)
    assert isinstance(instance, ProcessModelInstance)
    [result] = instance.execute([request(_x(1, 2))])
    assert {t.name: t for t in result.outputs}["Y"].array.tolist() == [2, 3]
    assert _pid(result) == instance.pid != os.getpid()


def test_in_process_parameter(repo: Path, instances: list[Any]) -> None:
    instance = _make(repo, instances, pbtxt=PBTXT + IN_PROCESS)
    assert isinstance(instance, PythonModelInstance)
    assert _pid(instance.execute([request(_x(1))])[0]) == os.getpid()


def test_two_instances_execute_at_once_on_two_cores(
    repo: Path, instances: list[Any], tmp_path: Path
) -> None:
    """Order of events, not a speed-up (a shared machine stalls): the two instances' executes,
    each in its own process, play ping-pong through one shared byte, each spinning until it is
    its turn. Each finishes only while the other executes (a GIL or a lock between them would
    leave the first waiting until its 30 s guard). On one core every turn needs a context
    switch, since the other player must be switched in to hand the turn back, so more turns
    than switches means the two ran on two cores at the same moment. Load on the machine adds
    switches (preemptions), not turns: the margin stays wide on a busy two-core runner."""
    first, second = _make(repo, instances), _make(repo, instances)
    board = tmp_path / "board"
    board.write_bytes(b"\0")
    results: dict[int, Any] = {}

    def play(instance: Any, role: int) -> None:
        params = {"mode": "ping_pong", "board": str(board), "role": role, "turns": PING_PONG}
        [results[role]] = instance.execute([request(_x(0), **params)])

    threads = [threading.Thread(target=play, args=pair) for pair in ((first, 0), (second, 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(results) == [0, 1]
    assert {_pid(r) for r in results.values()} == {first.pid, second.pid}
    for result in results.values():
        turns, switches = {t.name: t for t in result.outputs}["Y"].array.tolist()
        assert turns == PING_PONG  # the other instance executed while this one did
        # on one core each turn after the second needs a switch: turns - 2 <= switches; a
        # two-core runner at load 7 showed 25 or more turns a switch
        assert turns - 2 >= 4 * max(switches, 1), (turns, switches)


@pytest.mark.parametrize("crash", ["exit", "segfault", "kill"])
def test_a_crash_fails_only_the_requests_in_flight(
    repo: Path, instances: list[Any], crash: str, caplog: pytest.LogCaptureFixture
) -> None:
    instance = _make(repo, instances, name="crashy")
    other = _make(repo, instances, name="other")
    before = _pid(instance.execute([request(_x(1))])[0])
    with caplog.at_level(logging.ERROR):
        results = instance.execute([request(_x(1), mode=crash), request(_x(2))])
    expected = (
        "Failed to process the request(s) for model instance 'crashy_0_0', "
        "message: Stub process 'crashy_0_0' is not healthy."
    )
    for result in results:
        assert isinstance(result.error, InternalError)
        assert result.error.message == expected
    assert any("will be restarted" in r.getMessage() for r in caplog.records)
    [again] = instance.execute([request(_x(5))])  # the restarted stub initialized again
    assert {t.name: t for t in again.outputs}["Y"].array.tolist() == [6]
    assert _pid(again) != before
    assert other.execute([request(_x(1))])[0].error is None  # other models untouched


def test_a_stub_killed_while_idle_is_restarted_for_the_next_request(
    repo: Path, instances: list[Any]
) -> None:
    instance = _make(repo, instances)
    pid = instance.pid
    os.kill(pid, signal.SIGKILL)  # our own child
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    [result] = instance.execute([request(_x(1))])  # nothing was in flight: it just works
    assert _pid(result) not in (pid, os.getpid())


def test_close_is_bounded_when_finalize_hangs(
    repo: Path, instances: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_TEST_HANG_FINALIZE", "1")
    instance = _make(repo, [])
    instance.finalize_timeout_s = 0.5
    pid = instance.pid
    start = time.monotonic()
    instance.close()
    assert time.monotonic() - start < 10
    with pytest.raises(ChildProcessError):  # reaped: it no longer exists as our child
        os.waitpid(pid, os.WNOHANG)


def test_close_from_another_thread_ends_a_hung_execute(repo: Path) -> None:
    instance = _make(repo, [])
    instance.finalize_timeout_s = 0.5
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.extend(instance.execute([request(_x(1), mode="hang")]))
    )
    worker.start()
    time.sleep(0.3)
    start = time.monotonic()
    instance.close()
    worker.join(timeout=10)
    assert not worker.is_alive() and time.monotonic() - start < 10
    assert "is not healthy" in str(results[0].error)
    assert "closing" in str(instance.execute([request(_x(1))])[0].error)


def test_log_records_reach_the_server(
    repo: Path, instances: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    instance = _make(repo, instances)
    with caplog.at_level(logging.INFO, logger="workbench.python_model"):
        instance.execute([request(_x(1), mode="log")])
    record = next(r for r in caplog.records if r.name == "workbench.python_model")
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "a warning from the stub"


ECHO_PBTXT = """
backend: "python"
input { name: "A" data_type: TYPE_FP64 dims: [-1, -1] }
input { name: "S" data_type: TYPE_STRING dims: [-1] }
output { name: "A" data_type: TYPE_FP64 dims: [-1, -1] }
output { name: "S" data_type: TYPE_STRING dims: [-1] }
"""

ECHO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = request.inputs()[0].as_numpy()
            a[0, 0] = -1.0  # inputs are writable, as in Triton's stub
            outputs = [pb_utils.Tensor(t.name(), t.as_numpy()) for t in request.inputs()]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""


def test_large_and_string_tensors_cross_shared_memory(repo: Path, instances: list[Any]) -> None:
    folder = write_model(repo, "echo", ECHO_PBTXT, {"1/model.py": ECHO})
    instance = PythonBackend().create_instance(context_for(folder))
    instances.append(instance)
    strings = np.array([b"", b"\x00x", "é".encode(), b"z" * 5000], dtype=np.object_)
    for rows in (3, 1500, 10):  # 1500 x 1000 doubles: 12 MB, more than the first region
        big = np.arange(rows * 1000, dtype=np.float64).reshape(rows, 1000)
        [result] = instance.execute([request({"A": big, "S": Tensor("S", "BYTES", strings)})])
        assert result.error is None, result.error
        out = {t.name: t.array for t in result.outputs}
        assert out["A"][0, 0] == -1.0 and np.array_equal(out["A"][1:], big[1:])
        assert big[0, 0] == 0.0  # the server's copy is untouched
        assert out["S"].tolist() == strings.tolist()


def _in_shared_body(array: np.ndarray) -> np.ndarray:
    """``array`` copied into a buffer the stub can map, as a large HTTP body is read."""
    view = shared_buffers.allocate(array.nbytes)
    shared = np.ndarray(array.shape, array.dtype, view)
    shared[...] = array
    return shared


@pytest.mark.skipif(not shared_buffers.available(), reason="needs memfd_create and /proc")
def test_an_input_in_a_shared_body_reaches_the_stub_uncopied_and_unchanged(
    repo: Path, instances: list[Any]
) -> None:
    # Issue #12: the stub maps the body copy-on-write instead of receiving a copy; the model
    # writing into its input changes only its own pages.
    folder = write_model(repo, "echo", ECHO_PBTXT, {"1/model.py": ECHO})
    instance = PythonBackend().create_instance(context_for(folder))
    instances.append(instance)
    big = _in_shared_body(np.arange(1500 * 1000, dtype=np.float64).reshape(1500, 1000))
    strings = np.array([b"s"], dtype=np.object_)
    [result] = instance.execute([request({"A": big, "S": Tensor("S", "BYTES", strings)})])
    assert result.error is None, result.error
    out = {t.name: t.array for t in result.outputs}
    assert out["A"][0, 0] == -1.0 and np.array_equal(out["A"][1:], big[1:])
    assert big[0, 0] == 0.0  # the body, which an ensemble might hand to another step
    assert instance._stub._to_stub.region.size < big.nbytes  # never copied into the region


@pytest.mark.skipif(not shared_buffers.available(), reason="needs memfd_create and /proc")
def test_a_body_the_stub_cannot_map_fails_its_request_only(
    repo: Path, instances: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write_model(repo, "echo", ECHO_PBTXT, {"1/model.py": ECHO})
    instance = PythonBackend().create_instance(context_for(folder))
    instances.append(instance)
    big = _in_shared_body(np.ones((100, 1000), dtype=np.float64))
    strings = np.array([b"s"], dtype=np.object_)
    ref_of, stub_pid = shared_buffers.ref_of, instance._stub.pid
    with monkeypatch.context() as patch:  # a descriptor the server does not have
        patch.setattr(shared_buffers, "ref_of", lambda a: (*ref_of(a)[:1], 1 << 20, 0, 0))
        [result] = instance.execute([request({"A": big, "S": Tensor("S", "BYTES", strings)})])
    assert isinstance(result.error, InternalError)
    assert "failed to read the request's inputs" in str(result.error)
    [result] = instance.execute([request({"A": big, "S": Tensor("S", "BYTES", strings)})])
    assert result.error is None, result.error
    assert instance._stub.pid == stub_pid  # the same stub served it: the failure was the request's


BLS_PBTXT = """
backend: "python"
input { name: "X" data_type: TYPE_FP32 dims: [2] }
output { name: "Y" data_type: TYPE_FP32 dims: [2] }
"""

BLS_GATHER = """
import asyncio
import threading

import triton_python_backend_utils as pb_utils


def double(x):
    request = pb_utils.InferenceRequest(
        model_name="double", inputs=[x], requested_output_names=["Y"]
    )
    return request


class TritonPythonModel:
    async def execute(self, requests):
        x = pb_utils.get_input_tensor_by_name(requests[0], "X")
        answers = await asyncio.gather(*(double(x).async_exec() for _ in range(3)))
        found = []
        thread = threading.Thread(target=lambda: found.append(double(x).exec()))
        thread.start()
        thread.join()
        total = sum(pb_utils.get_output_tensor_by_name(a, "Y").as_numpy() for a in answers)
        total = total + pb_utils.get_output_tensor_by_name(found[0], "Y").as_numpy()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", total)])]
"""


def test_bls_from_the_stub_concurrently_and_from_a_thread(repo: Path, instances: list[Any]) -> None:
    client = FakeClient()
    folder = write_model(repo, "bls", BLS_PBTXT, {"1/model.py": BLS_GATHER})
    instance = PythonBackend().create_instance(context_for(folder, client=client))
    instances.append(instance)
    [result] = instance.execute([request({"X": np.array([1, 2], np.float32)})])
    assert result.error is None, result.error
    assert result.outputs[0].array.tolist() == [8, 16]  # 4 answers of 2x
    assert client.calls == [("double", ["Y"])] * 4


async def _as_the_core_does(instance: Any, batch: list[Any]) -> list[Any]:
    """``execute_async``, or ``execute`` on a thread when it declines (a stub restarting), as
    ``core/execution.py`` does."""
    results = await instance.execute_async(batch)
    if results is None:
        results = await asyncio.to_thread(instance.execute, batch)
    return list(results)


def test_execute_async_on_the_event_loop(repo: Path, instances: list[Any]) -> None:
    """The optional path a core may await: the loop itself reads the stub's answers."""
    instance = _make(repo, instances, name="looped")

    async def scenario() -> None:
        for value in range(3):
            [result] = await instance.execute_async([request(_x(value))])
            assert {t.name: t for t in result.outputs}["Y"].array.tolist() == [value + 1]
        [crashed] = await instance.execute_async([request(_x(1), mode="exit")])
        assert "is not healthy" in str(crashed.error)
        [again] = await _as_the_core_does(instance, [request(_x(7))])  # waits for the restart
        assert {t.name: t for t in again.outputs}["Y"].array.tolist() == [8]
        task = asyncio.ensure_future(instance.execute_async([request(_x(1), mode="spin")]))
        await asyncio.sleep(0.05)
        task.cancel()  # the stub still answers; its shared memory is freed then
        with pytest.raises(asyncio.CancelledError):
            await task
        [after] = await instance.execute_async([request(_x(2))])
        assert after.error is None
        # blocking calls from a thread still work while the loop reads the channel
        [threaded] = await asyncio.to_thread(instance.execute, [request(_x(3))])
        assert {t.name: t for t in threaded.outputs}["Y"].array.tolist() == [4]

    asyncio.run(scenario())

    async def on_another_loop() -> list[Any]:
        return await instance.execute_async([request(_x(4))])

    assert asyncio.run(on_another_loop())[0].error is None
    # the loop is gone: close() reads the finalize answer itself, without waiting it out
    start = time.monotonic()
    instance.close()
    assert time.monotonic() - start < 5
    instances.remove(instance)


def test_start_execute_settles_by_callback_on_the_loop(repo: Path, instances: list[Any]) -> None:
    """The core's cheapest path: the call leaves at once, the reply runs a callback where it
    is read; a crash in flight fails only those requests, and a dead idle stub is declined."""
    instance = _make(repo, instances, name="started")

    async def call(*batch: Any) -> list[Any]:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Any]] = loop.create_future()
        thread = threading.get_ident()

        def on_done(results: list[Any]) -> None:
            assert threading.get_ident() == thread  # on the loop's thread
            answer.set_result(results)

        assert instance.start_execute(list(batch), on_done)
        return await answer

    async def scenario() -> None:
        [one, two] = await call(request(_x(1)), request(_x(2)))
        assert [{t.name: t for t in r.outputs}["Y"].array.tolist() for r in (one, two)] == [
            [2],
            [3],
        ]
        crashed = await call(request(_x(1), mode="exit"), request(_x(2)))
        assert all("is not healthy" in str(r.error) for r in crashed)
        [again] = await _as_the_core_does(instance, [request(_x(7))])  # waits for the restart
        assert {t.name: t for t in again.outputs}["Y"].array.tolist() == [8]
        [after] = await call(request(_x(4)))
        assert {t.name: t for t in after.outputs}["Y"].array.tolist() == [5]
        pid = instance.pid
        os.kill(pid, signal.SIGKILL)  # our own child, idle: the next call finds it dead
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert not instance.start_execute([request(_x(5))], lambda results: None)
        [revived] = await _as_the_core_does(instance, [request(_x(5))])
        assert _pid(revived) != pid

    asyncio.run(scenario())


KEEPER = """
import numpy as np
import triton_python_backend_utils as pb_utils

KEPT = []


class TritonPythonModel:
    def execute(self, requests):
        a = requests[0].inputs()[0].as_numpy()
        KEPT.append(a[10:])  # a view of the input, kept after execute returned
        total = np.array([sum(float(k[-1]) for k in KEPT)])
        return [pb_utils.InferenceResponse([
            pb_utils.Tensor("A", a * 2),
            pb_utils.Tensor("KEPT", total),
        ])]
"""

KEEPER_PBTXT = """
backend: "python"
input { name: "A" data_type: TYPE_FP64 dims: [-1] }
output { name: "A" data_type: TYPE_FP64 dims: [-1] }
output { name: "KEPT" data_type: TYPE_FP64 dims: [1] }
"""


def test_big_tensors_stay_valid_while_referenced(repo: Path, instances: list[Any]) -> None:
    """In-place (zero-copy) tensors keep their shared memory until nobody refers to them."""
    folder = write_model(repo, "keeper", KEEPER_PBTXT, {"1/model.py": KEEPER})
    instance = PythonBackend().create_instance(context_for(folder))
    instances.append(instance)
    n = 100_000  # 800 kB: read in place on both sides
    outputs = []
    for i in range(1, 4):
        [result] = instance.execute([request({"A": np.full(n, float(i))})])
        assert result.error is None, result.error
        outputs.append({t.name: t.array for t in result.outputs})
    # the model's kept views still hold 1, 2, 3; ours still hold 2, 4, 6
    assert [float(o["KEPT"][0]) for o in outputs] == [1.0, 3.0, 6.0]
    assert [float(o["A"][-1]) for o in outputs] == [2.0, 4.0, 6.0]
    assert all(np.all(o["A"] == o["A"][0]) for o in outputs)


HELPER_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

import helper  # a module next to model.py, imported by plain name


class TritonPythonModel:
    def execute(self, requests):
        value = np.array([helper.VALUE], np.float32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", value)]) for _ in requests]
"""


def test_helper_modules_of_the_same_name_stay_apart(repo: Path, instances: list[Any]) -> None:
    """Each stub imports its own ``helper.py``, even after the server loaded both models."""
    backend = PythonBackend()
    for value, name in ((1, "first"), (2, "second")):
        files = {"1/model.py": HELPER_MODEL, "1/helper.py": f"VALUE = {value}\n"}
        folder = write_model(repo, name, BLS_PBTXT, files)
        backend.auto_complete(load_config(folder), folder, folder / "1")  # imports in here
    for value, name in ((1, "first"), (2, "second")):
        instance = backend.create_instance(context_for(repo / name))
        instances.append(instance)
        [result] = instance.execute([request({"X": np.zeros(2, np.float32)})])
        assert result.outputs[0].array.tolist() == [value]


def test_the_stub_imports_the_servers_workbench_and_the_model_the_working_directory(
    repo: Path, instances: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shadow = tmp_path / "cwd"
    (shadow / "workbench").mkdir(parents=True)
    (shadow / "workbench" / "__init__.py").write_text("raise SystemExit('the wrong workbench')\n")
    (shadow / "helper_in_cwd.py").write_text("STEP = 41\n")
    monkeypatch.chdir(shadow)
    monkeypatch.setattr("sys.path", ["", *sys.path])  # as in a notebook
    model = "import helper_in_cwd\n" + MODEL.replace(
        "STARTS = []", "STARTS = []\nassert helper_in_cwd.STEP == 41"
    )
    write_model(repo, "cwd_user", PBTXT, {"1/model.py": model})
    instance = PythonBackend().create_instance(context_for(repo / "cwd_user"))
    instances.append(instance)
    assert isinstance(instance, ProcessModelInstance)
    [result] = instance.execute([request(_x(1))])
    assert {t.name: t for t in result.outputs}["Y"].array.tolist() == [2]


def test_an_unreadable_reply_or_a_detached_reader_still_answers_the_requests(
    repo: Path, instances: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    instance = _make(repo, instances, name="answered")

    async def call(*batch: Any) -> list[Any]:
        answer: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        assert instance.start_execute(list(batch), answer.set_result)
        return await asyncio.wait_for(answer, 10)

    def unreadable(*args: Any) -> Any:
        raise ValueError("a damaged reply")

    async def scenario() -> None:
        with monkeypatch.context() as patched:
            patched.setattr(_server_stub, "read_results", unreadable)
            [failed] = await call(request(_x(1)))
        assert isinstance(failed.error, InternalError)
        assert "unreadable stub reply: a damaged reply" in str(failed.error)
        [fine] = await call(request(_x(2)))  # the stub serves on
        assert {t.name: t for t in fine.outputs}["Y"].array.tolist() == [3]
        # A reader detached with a call in flight (the stub being stopped) fails that call
        # instead of leaving it waiting for a reply nobody reads on this loop.
        answer: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        assert instance.start_execute([request(_x(1), mode="hang")], answer.set_result)
        instance._stub._loop_reader.detach()
        [cut] = await asyncio.wait_for(answer, 10)
        assert "is not healthy" in str(cut.error)

    asyncio.run(scenario())
