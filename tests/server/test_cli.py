"""``workbench serve`` in a subprocess: tritonserver flags, readiness, SIGTERM drains."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.core.conftest import write_add_model
from workbench.server.cli import build_parser

pytestmark = pytest.mark.integration


def test_parser_takes_tritonserver_flag_names() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--model-repository=/m",
            "--http-port",
            "9000",
            "--model-control-mode=explicit",
            "--load-model",
            "a",
            "--load-model=b",
            "--repository-poll-secs=5",
            "--strict-model-config=false",
            "--log-verbose=1",
            "--exit-timeout-secs=3",
            "--http-address=127.0.0.1",
        ]
    )
    assert args.model_repository == ["/m"] and args.http_port == 9000
    assert args.load_model == ["a", "b"] and args.model_control_mode == "explicit"
    assert args.strict_model_config is False and args.exit_timeout_secs == 3.0


def _start(repo: Path) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable,
        "-m",
        "workbench",
        "serve",
        f"--model-repository={repo}",
        "--http-port=0",
        "--http-address=127.0.0.1",
        "--exit-timeout-secs=10",
    ]
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    assert process.stderr is not None
    deadline = time.monotonic() + 60
    for line in process.stderr:
        found = re.search(r"Started HTTPService at 127\.0\.0\.1:(\d+)", line)
        if found:
            return process, f"http://127.0.0.1:{found.group(1)}"
        assert time.monotonic() < deadline
    raise AssertionError(f"server exited with {process.wait()}")


def test_serve_then_sigterm_drains_in_flight_requests(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_add_model(repo, "slow", sleep=1.0)
    process, url = _start(repo)
    try:
        assert requests.get(f"{url}/v2/health/ready", timeout=5).status_code == 200
        body = {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 4], "datatype": "FP32", "data": [0, 0, 0, 0]}
            ]
        }
        replies: list[requests.Response] = []
        worker = threading.Thread(
            target=lambda: replies.append(
                requests.post(f"{url}/v2/models/slow/infer", data=json.dumps(body), timeout=30)
            )
        )
        worker.start()
        time.sleep(0.3)  # the request is now executing inside the model
        process.send_signal(signal.SIGTERM)
        worker.join(30)
        assert replies and replies[0].status_code == 200, replies
        assert replies[0].json()["outputs"][0]["data"] == [1, 1, 1, 1]
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        assert process.stderr is not None
        process.stderr.close()
