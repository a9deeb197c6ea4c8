"""The child process ends when its input ends: Jupyter gone means the server gone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.core.conftest import write_add_model
from workbench.jupyter.child import READY_PREFIX

pytestmark = pytest.mark.integration


def start_child(options: dict[str, object]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "workbench.jupyter.child", json.dumps(options)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )


def ready_line(child: subprocess.Popen[str]) -> dict[str, object]:
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith(READY_PREFIX):
            return dict(json.loads(line.removeprefix(READY_PREFIX)))
    raise AssertionError("no ready line")


def end(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.kill()
    child.wait()
    for stream in (child.stdin, child.stdout):
        if stream is not None and not stream.closed:
            stream.close()


def test_the_child_reports_its_ports_and_exits_when_its_input_closes(tmp_path: Path) -> None:
    write_add_model(tmp_path, "add")
    child = start_child(
        {"model_repository": str(tmp_path), "http_port": 0, "grpc_port": 0, "metrics_port": 0}
    )
    try:
        ports = ready_line(child)
        assert all(isinstance(ports[k], int) and ports[k] for k in ("http_port", "grpc_port"))
        assert child.stdin is not None
        child.stdin.close()  # what Jupyter's exit, even a SIGKILL, does to the pipe
        assert child.wait(timeout=60) == 0
    finally:
        end(child)


def test_a_failed_start_is_reported_on_the_ready_line(tmp_path: Path) -> None:
    child = start_child({"model_repository": str(tmp_path / "missing")})
    try:
        assert "missing" in str(ready_line(child)["error"])
        assert child.wait(timeout=60) == 1
    finally:
        end(child)
