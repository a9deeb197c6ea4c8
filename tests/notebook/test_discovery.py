"""The discovery file a kernel reads to find the extension's server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.errors import NotFoundError
from workbench.notebook import discovery


def info(jupyter_pid: int, server_pid: int, started: str) -> dict[str, Any]:
    return {
        "jupyter_pid": jupyter_pid,
        "server_pid": server_pid,
        "engine": "embedded",
        "model_repository": "/repo",
        "http_url": "http://127.0.0.1:1234",
        "http_address": "127.0.0.1:1234",
        "grpc_url": "127.0.0.1:1235",
        "metrics_url": None,
        "jupyter_url": "http://localhost:8888/",
        "proxy_url": "http://localhost:8888/workbench",
        "started": started,
        "version": "0.1.0",
    }


def ended_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_live_servers_are_found_newest_first_and_ended_ones_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(discovery.ENV_VAR, raising=False)
    me = os.getpid()
    discovery.write_discovery(tmp_path / "workbench-1.json", info(me, me, "2026-01-01T00:00:00"))
    discovery.write_discovery(tmp_path / "workbench-2.json", info(me, me, "2026-01-02T00:00:00"))
    gone = ended_pid()
    discovery.write_discovery(tmp_path / "workbench-3.json", info(me, gone, "2026-01-03T00:00"))
    (tmp_path / "workbench-4.json").write_text("{not json")
    found = discovery.find_running(tmp_path)
    assert [s.path.name for s in found] == ["workbench-2.json", "workbench-1.json"]
    assert found[0].http_url == "http://127.0.0.1:1234" and found[0].metrics_url is None
    assert oct((tmp_path / "workbench-1.json").stat().st_mode & 0o777) == "0o600"


def test_the_variable_names_the_server_to_prefer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = os.getpid()
    discovery.write_discovery(tmp_path / "workbench-1.json", info(me, me, "2026-01-01T00:00:00"))
    discovery.write_discovery(tmp_path / "workbench-2.json", info(me, me, "2026-01-02T00:00:00"))
    monkeypatch.setenv(discovery.ENV_VAR, str(tmp_path / "workbench-1.json"))
    assert discovery.running_server(tmp_path).path.name == "workbench-1.json"


def test_no_server_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="jupyter server extension list"):
        discovery.running_server(tmp_path)
    discovery.remove_discovery(tmp_path / "workbench-9.json")  # nothing to remove: no error
