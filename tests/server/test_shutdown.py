"""Exit and unload with a hung model, as tritonserver 2.51 does (docs/shutdown-facts.md).

``--exit-timeout-secs`` bounds the whole exit: past it, the stub processes still running (a
hung ``execute`` or ``finalize``) are killed, the log says which and Triton's "Exit timeout
expired" line, and the process exits 1. An unload answers while a hung ``execute`` keeps the
model ``UNLOADING``. The waits below are failure guards, not speed assertions.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import requests

from workbench.server.hosting import Server

CONFIG = """
name: "hang"
backend: "python"
max_batch_size: 0
input [{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [ 1 ] }]
"""
#: hangs in ``execute`` / ``finalize`` while the marker files exist (at most two minutes)
MODEL = """
import os, time
import triton_python_backend_utils as pb_utils

FOLDER = {folder!r}

def hold(what):
    deadline = time.monotonic() + 120
    while os.path.exists(os.path.join(FOLDER, what)) and time.monotonic() < deadline:
        time.sleep(0.05)

class TritonPythonModel:
    def execute(self, requests):
        open(os.path.join(FOLDER, "executing"), "w").close()
        hold("hang_execute")
        inputs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]) for x in inputs]

    def finalize(self):
        hold("hang_finalize")
        open(os.path.join(FOLDER, "finalized"), "w").close()
"""
BODY = {"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": [1]}]}
TRITON_EXIT_LINE = "failed to stop server: Internal - Exit timeout expired. Exiting immediately."


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    model = tmp_path / "repo" / "hang"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL.format(folder=str(tmp_path)))
    return tmp_path / "repo"


def _until(condition: Callable[[], bool], guard_s: float = 60.0) -> None:
    deadline = time.monotonic() + guard_s
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)


def _ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/v2/health/ready", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def _send_in_background(url: str) -> None:
    def send() -> None:
        try:
            requests.post(f"{url}/v2/models/hang/infer", json=BODY, timeout=150)
        except requests.RequestException:
            pass  # the server ends while this request hangs

    threading.Thread(target=send, daemon=True).start()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.integration
@pytest.mark.parametrize("hang", ["execute", "finalize", None])
def test_serve_exits_within_its_timeout_and_ends_hung_stubs(
    repo: Path, tmp_path: Path, hang: str | None
) -> None:
    if hang is not None:
        (tmp_path / f"hang_{hang}").touch()
    port = _free_port()
    log = tmp_path / "serve.log"
    command = [
        *(sys.executable, "-m", "workbench", "serve", f"--model-repository={repo}"),
        *(f"--http-port={port}", "--grpc-port=0", "--metrics-port=0", "--exit-timeout-secs=2"),
    ]
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _until(lambda: _ready(url) or server.poll() is not None)
        stubs = psutil.Process(server.pid).children(recursive=True)
        assert stubs, log.read_text()
        if hang == "execute":
            _send_in_background(url)
            _until(lambda: (tmp_path / "executing").exists())
        server.send_signal(signal.SIGTERM)
        returncode = server.wait(timeout=90)
    finally:
        if server.poll() is None:
            server.kill()
    text = log.read_text()
    _until(lambda: not any(s.is_running() and s.status() != psutil.STATUS_ZOMBIE for s in stubs))
    if hang is None:
        assert returncode == 0 and (tmp_path / "finalized").exists(), text
        assert "killed" not in text
    else:
        assert returncode == 1, text
        assert "stub process 'hang_0'" in text and "killed: the exit timeout expired" in text
        assert TRITON_EXIT_LINE in text and "will be restarted" not in text


@pytest.mark.integration
def test_unload_of_a_hung_model_answers_and_leaves_it_unloading(repo: Path, tmp_path: Path) -> None:
    (tmp_path / "hang_execute").touch()
    with Server(repo, http_port=0, grpc_port=0, metrics_port=0, model_control_mode="explicit",
                load_model=["hang"]) as server:  # fmt: skip
        url = server.url
        _send_in_background(url)
        _until(lambda: (tmp_path / "executing").exists())
        reply = requests.post(f"{url}/v2/repository/models/hang/unload", timeout=30)
        assert (reply.status_code, reply.content) == (200, b"")
        assert requests.get(f"{url}/v2/models/hang/ready", timeout=5).status_code == 400
        index = requests.post(f"{url}/v2/repository/index", json={}, timeout=5).json()
        assert index == [{"name": "hang", "version": "1", "state": "UNLOADING"}]
        os.remove(tmp_path / "hang_execute")  # the request ends; then the unload finishes
        _until(lambda: (tmp_path / "finalized").exists())
        _until(lambda: _index(url)[0]["state"] == "UNAVAILABLE")


def _index(url: str) -> list[dict[str, str]]:
    reply = requests.post(f"{url}/v2/repository/index", json={}, timeout=5)
    return list(reply.json())
