"""One owner for threads: ``workbench/threads.py`` starts every thread the package runs.

Checked twice: in the source (no other module makes a thread, a pool, or sends blocking work to
a loop's default executor) and at run time (a server with stub processes, an in-process model,
a decoupled model and BLS calls runs no thread of ours that the module did not start).
"""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.peers import copy_repository
from workbench import threads
from workbench.server.hosting import Server

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"
REPOSITORY = Path(__file__).resolve().parent / "assets" / "decoupled_bls_repo"
IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'

#: calls that make a thread or a pool, or run blocking work on a loop's default executor
FORBIDDEN = {"Thread", "Timer", "ThreadPoolExecutor", "to_thread"}


def _thread_calls(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in FORBIDDEN:
            found.append((node.lineno, name))
        elif name == "run_in_executor" and (
            not node.args or (isinstance(node.args[0], ast.Constant) and node.args[0].value is None)
        ):
            found.append((node.lineno, "run_in_executor(None, ...)"))
    return sorted(found)


def test_no_module_but_threads_makes_a_thread() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "threads.py":
            continue
        for line, call in _thread_calls(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {call}")
    assert offenders == []


def test_the_source_check_finds_each_kind_of_thread() -> None:
    """The check above can fail: each forbidden form is found in a snippet."""
    snippet = (
        "threading.Thread(target=f)\n"
        "ThreadPoolExecutor(2)\n"
        "await asyncio.to_thread(f)\n"
        "loop.run_in_executor(None, f)\n"
        "loop.run_in_executor(pool, f)\n"
    )
    assert [call for _, call in _thread_calls(ast.parse(snippet))] == [
        "Thread",
        "ThreadPoolExecutor",
        "to_thread",
        "run_in_executor(None, ...)",
    ]


def _foreign(thread: threading.Thread) -> bool:
    """A thread of a library we use (grpc.aio's completion-queue poller)."""
    target = getattr(thread, "_target", None)  # threading keeps the target privately
    return str(getattr(target, "__module__", "")).startswith("grpc")


@pytest.mark.integration
def test_a_serving_server_runs_only_threads_the_module_started(tmp_path: Path) -> None:
    in_process = copy_repository(REPOSITORY, tmp_path / "in_process")
    config = in_process / "bls_caller" / "config.pbtxt"
    config.write_text(config.read_text() + IN_PROCESS)
    before = set(threading.enumerate())
    seen: dict[str, bool] = {}
    for repository in (copy_repository(REPOSITORY, tmp_path / "stubs"), in_process):
        with Server(repository, http_port=0, grpc_port=0, metrics_port=0) as server:
            client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
            inputs = []
            for name in ("IN", "LAST_WITH_DATA"):
                tensor = httpclient.InferInput(name, [1], "INT32")
                tensor.set_data_from_numpy(np.array([2 if name == "IN" else 0], np.int32))
                inputs.append(tensor)
            client.infer("bls_caller", inputs)  # BLS, decoupled BLS and async_exec inside
            for thread in set(threading.enumerate()) - before:
                if not _foreign(thread):
                    seen[thread.name] = threads.owns(thread)
    assert seen and all(seen.values()), seen
    # the kinds this scenario must have started: the loop, instance threads, a BLS pool,
    # a decoupled stub's reader and the in-process model's own loop (the shared pools may
    # have started their threads in an earlier test of this process)
    names = set(seen)
    assert "workbench-server" in names
    assert {"bls_caller_0_0", "repeat_0_0", "repeat_0-stub-reader"} <= names
    assert any(name.startswith("bls_caller_0-bls_") for name in names)
    assert "bls_caller-asyncio" in names  # the in-process model's loop


def test_a_thread_started_elsewhere_is_not_owned() -> None:
    stray = threading.Thread(target=lambda: None, name="stray")
    stray.start()
    stray.join()
    assert not threads.owns(stray)
    started = threads.start("workbench-probe", lambda: None)
    started.join()
    assert threads.owns(started)


def test_shared_pools_are_bounded_and_named() -> None:
    for work in threads.Work:
        pool = threads.pool(work)
        assert pool is threads.pool(work)  # one per kind per process
        assert pool._max_workers == work.threads  # the bound in the module's table
        assert work.prefix.startswith("workbench-")
