"""``c.Workbench.engine = "tritonserver"``: the extension runs real tritonserver 2.51.

The binary is the prepared peer (``tests/integration/peers.py``), given as
``c.Workbench.tritonserver``; the extension wires its python backend itself
(``find_tritonserver``). The HTTP port is configured, gRPC and metrics are 0 (ephemeral).
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import psutil
import pytest
from tornado.httpclient import HTTPClientError

from tests.integration.conftest import peers  # noqa: F401  (the fixture)
from tests.integration.peers import Peers, free_port
from tests.jupyter.conftest import wait_for
from tests.jupyter.test_handlers import call, refused
from workbench.jupyter.host import ServerHost

pytestmark = [pytest.mark.integration, pytest.mark.conformance]


@pytest.fixture
def http_port() -> int:
    return free_port()


@pytest.fixture
def autostart() -> bool:
    return True


@pytest.fixture
def jp_server_config(
    repository: Path,
    peers: Peers,  # noqa: F811
    http_port: int,
    autostart: bool,
) -> dict[str, Any]:
    settings = {
        "engine": "tritonserver",
        "tritonserver": str(peers.tritonserver),
        "http_port": http_port,
        "autostart": autostart,
        "stats_interval": 0.2,
    }
    return {"ServerApp": {"jpserver_extensions": {"workbench": True}}, "Workbench": settings}


async def test_status_shows_real_triton_on_the_configured_port(
    jp_fetch: Any, host: ServerHost, http_port: int
) -> None:
    status = await call(jp_fetch, "status")
    assert status["state"] == "running" and status["engine"] == "tritonserver"
    assert status["server_version"] == "2.51.0"
    endpoints = status["endpoints"]
    assert endpoints["http_url"] == f"http://127.0.0.1:{http_port}"
    grpc_port = int(endpoints["grpc_url"].rpartition(":")[2])
    metrics_port = int(endpoints["metrics_url"].split(":")[2].removesuffix("/metrics"))
    assert len({http_port, grpc_port, metrics_port}) == 3 and 0 not in (grpc_port, metrics_port)
    assert "tritonserver" in psutil.Process(endpoints["pid"]).name()
    assert host.discovery_file.exists()


async def test_models_list_each_state_and_reason_and_load_unload_reach_triton(
    jp_fetch: Any, host: ServerHost
) -> None:
    models = {m["name"]: m for m in (await call(jp_fetch, "models"))["models"]}
    assert {name: m["state"] for name, m in models.items()} == {
        "add": "READY",
        "echo": "READY",
        "broken": "UNAVAILABLE",
    }
    assert "broken on purpose" in models["broken"]["reason"]
    await call(jp_fetch, "models", "add", "unload", method="POST")
    for _ in range(200):  # Triton unloads in the background: UNLOADING, then UNAVAILABLE
        if await _state(jp_fetch, "add") == "UNAVAILABLE":
            break
        await asyncio.sleep(0.05)
    assert await _state(jp_fetch, "add") == "UNAVAILABLE"
    with pytest.raises(HTTPClientError) as caught:
        await _infer_add(jp_fetch)
    assert caught.value.code == 404 and caught.value.response is not None
    assert b"'add' has no available versions" in caught.value.response.body  # Triton's words
    loaded = await call(jp_fetch, "models", "add", "load", method="POST")
    assert [m["state"] for m in loaded["models"]] == ["READY"]
    assert await _infer_add(jp_fetch) == [2.0, 3.0, 4.0, 5.0]


def _tritonserver_and_stubs(host: ServerHost) -> tuple[psutil.Process, list[psutil.Process]]:
    """The tritonserver the extension runs and its python stubs."""
    assert host.endpoints is not None
    triton = psutil.Process(host.endpoints.pid)
    return triton, triton.children(recursive=True)


async def test_stop_ends_tritonserver_and_its_stubs_and_frees_the_port(
    jp_fetch: Any, host: ServerHost, http_port: int
) -> None:
    triton, stubs = _tritonserver_and_stubs(host)
    assert len(stubs) >= 2  # one per loaded python model (add, echo)
    stopped = await call(jp_fetch, "server", "stop", method="POST")
    assert stopped["state"] == "stopped" and stopped["endpoints"] is None
    assert not host.discovery_file.exists()
    assert not [p for p in [triton, *stubs] if _alive(p)]
    tail = "\n".join(stopped["log_tail"])  # the end of Triton's log: its shutdown
    assert "Signal (15) received." in tail and "successfully unloaded 'add' version 1" in tail
    with socket.socket() as sock:
        # as a server binds it (connections of the test may still be in TIME_WAIT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", http_port))  # nothing listens there any more
    started = await call(jp_fetch, "server", "start", method="POST")
    assert started["state"] == "running"
    assert started["endpoints"]["http_url"] == f"http://127.0.0.1:{http_port}"


async def test_a_tritonserver_that_dies_is_failed_with_its_last_log_lines(
    jp_fetch: Any, host: ServerHost, http_port: int
) -> None:
    triton, stubs = _tritonserver_and_stubs(host)
    triton.kill()  # the tritonserver this test's extension started
    await wait_for(lambda: host.state == "failed", 30.0)
    status = await call(jp_fetch, "status")
    assert status["reason"].startswith("the model server exited with code -9")
    assert f'"Started HTTPService at 127.0.0.1:{http_port}"' in status["reason"]
    assert not [p for p in stubs if _alive(p)]  # its process group went with it
    started = await call(jp_fetch, "server", "start", method="POST")
    assert started["state"] == "running" and started["reason"] == ""


@pytest.mark.parametrize("autostart", [False])
async def test_without_autostart_no_server_runs_until_the_start_route(
    jp_fetch: Any, jp_serverapp: Any, http_port: int
) -> None:
    others = {p.pid for p in _tritonservers()}  # another test's server may still be ending
    await jp_serverapp.extension_manager.start_all_extensions()
    await asyncio.sleep(0.5)  # a start in the background would have begun by now
    status = await call(jp_fetch, "status")
    assert status["state"] == "stopped" and status["endpoints"] is None
    assert not [p for p in _tritonservers() if p.pid not in others]
    code, body = await refused(jp_fetch, "models")
    assert code == 503 and "not running (stopped)" in body["message"]
    started = await call(jp_fetch, "server", "start", method="POST")
    assert started["state"] == "running" and started["engine"] == "tritonserver"
    assert started["endpoints"]["http_url"] == f"http://127.0.0.1:{http_port}"
    assert [p.pid for p in _tritonservers() if p.pid not in others] == [started["endpoints"]["pid"]]


async def _state(jp_fetch: Any, name: str) -> str:
    rows = (await call(jp_fetch, "models"))["models"]
    return str(next(m["state"] for m in rows if m["name"] == name))


async def _infer_add(jp_fetch: Any) -> Any:
    """``add``'s output for 1, 2, 3, 4, asked through the extension's proxy."""
    request = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                           "data": [1, 2, 3, 4]}]}  # fmt: skip
    reply = await jp_fetch("workbench", "v2", "models", "add", "infer", method="POST",
                           body=json.dumps(request))  # fmt: skip
    return json.loads(reply.body)["outputs"][0]["data"]


def _tritonservers() -> list[psutil.Process]:
    """This process's running tritonserver children (not a killed one not yet reaped)."""
    return [p for p in psutil.Process().children() if "tritonserver" in p.name() and _alive(p)]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
