"""The extension's server: discovery for kernels, real kernels sharing it across restarts, a
crash seen and recovered from."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.jupyter.conftest import wait_for
from workbench.jupyter.host import ServerHost
from workbench.notebook import discovery

pytestmark = pytest.mark.integration

#: run in a kernel: what Workbench.attach() found, and which kernel process it ran in
ATTACH = """
import json, os
import workbench as wb
bench = wb.Workbench.attach()
seen = {"server_pid": bench.server.found.server_pid, "url": bench.url, "kernel_pid": os.getpid(),
        "models": sorted(bench.models()["name"])}
bench.stop()
print(json.dumps(seen))
"""


async def test_kernels_find_the_server_through_the_runtime_dir(
    host: ServerHost, jp_runtime_dir: Path
) -> None:
    assert host.discovery_file.parent == jp_runtime_dir
    assert os.environ[discovery.ENV_VAR] == str(host.discovery_file)
    (found,) = discovery.find_running()
    assert host.endpoints is not None
    assert found.http_url == host.endpoints.url and found.server_pid == host.endpoints.pid
    assert found.grpc_url == host.endpoints.grpc_url
    assert found.jupyter_pid == os.getpid()
    assert found.proxy_url.endswith("/user/alice/workbench")


async def test_a_server_that_dies_is_failed_with_its_last_lines_and_starts_again(
    jp_fetch: Any, host: ServerHost
) -> None:
    assert host.endpoints is not None
    os.kill(host.endpoints.pid, signal.SIGKILL)  # the child this test's extension started
    await wait_for(lambda: host.state == "failed", 30.0)
    status = json.loads((await jp_fetch("workbench", "api", "status")).body)
    assert status["state"] == "failed" and "exited with code -9" in status["reason"]
    assert status["endpoints"] is None and status["log_tail"]
    assert not host.discovery_file.exists()
    started = await jp_fetch("workbench", "api", "server", "start", method="POST", body="")
    assert json.loads(started.body)["state"] == "running"
    models = json.loads((await jp_fetch("workbench", "api", "models")).body)["models"]
    assert {m["name"]: m["state"] for m in models}["add"] == "READY"


async def test_a_kernel_attaches_to_the_server_and_detaching_leaves_it_serving(
    host: ServerHost,
) -> None:
    from workbench.notebook import Workbench

    # a kernel's blocking calls go to the model server itself, not through this loop
    bench = Workbench.attach()
    assert host.endpoints is not None and bench.url == host.endpoints.url
    assert bench.grpc_url == host.endpoints.grpc_url
    assert set(bench.models()["name"]) == {"add", "echo", "broken"}
    assert bench.infer("add", {"INPUT0": [[1.0, 2.0, 3.0, 4.0]]})["OUTPUT0"].tolist() == [
        [2.0, 3.0, 4.0, 5.0]
    ]
    bench.stop()
    assert not bench.running and host.state == "running"


async def test_the_attach_magic_uses_the_extensions_server_and_stop_only_detaches(
    host: ServerHost,
) -> None:
    from workbench.notebook.magics import MagicSession

    session = MagicSession()
    bench = session.run_line("attach")
    assert host.endpoints is not None and bench.url == host.endpoints.url
    assert session.run_line("status") is bench and session.attached
    assert session.run_line("stop") == (
        f"detached from the Jupyter server's server at {bench.url} (it keeps serving)"
    )
    assert not bench.running and host.state == "running"


async def test_attach_without_a_server_says_so(host: ServerHost) -> None:
    from workbench.errors import NotFoundError
    from workbench.notebook import Workbench

    await host.stop()
    with pytest.raises(NotFoundError, match="no Triton Workbench server"):
        Workbench.attach()


async def test_kernels_share_the_server_and_a_restarted_kernel_attaches_to_it_again(
    jp_fetch: Any, jp_serverapp: Any, host: ServerHost
) -> None:
    """Real kernels of this Jupyter server, started and restarted through its REST API."""
    assert host.endpoints is not None
    server = {"server_pid": host.endpoints.pid, "url": host.endpoints.url,
              "models": ["add", "broken", "echo"]}  # fmt: skip
    first = await _start_kernel(jp_fetch)
    second = ""
    try:
        before = await _attach_in(jp_serverapp, first)
        assert {k: v for k, v in before.items() if k != "kernel_pid"} == server
        await jp_fetch("api", "kernels", first, "restart", method="POST", body="")
        after = await _attach_in(jp_serverapp, first)
        assert after["kernel_pid"] != before["kernel_pid"]  # a new kernel process
        assert {k: v for k, v in after.items() if k != "kernel_pid"} == server
        second = await _start_kernel(jp_fetch)
        other = await _attach_in(jp_serverapp, second)
        assert {k: v for k, v in other.items() if k != "kernel_pid"} == server
        assert host.state == "running" and host.endpoints.pid == server["server_pid"]
    finally:
        for kernel in (first, second):
            if kernel:
                await jp_fetch("api", "kernels", kernel, method="DELETE")


async def _start_kernel(jp_fetch: Any) -> str:
    reply = await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))
    return str(json.loads(reply.body)["id"])


async def _attach_in(jp_serverapp: Any, kernel_id: str) -> dict[str, Any]:
    """What ``Workbench.attach()`` finds when run in the kernel ``kernel_id``."""
    client = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels()
    printed: list[str] = []

    def output(message: dict[str, Any]) -> None:
        if message["msg_type"] == "stream" and message["content"]["name"] == "stdout":
            printed.append(message["content"]["text"])

    try:
        await client.wait_for_ready(timeout=120)
        reply = await client.execute_interactive(ATTACH, output_hook=output, timeout=120)
    finally:
        client.stop_channels()
    assert reply["content"]["status"] == "ok", reply["content"]
    return dict(json.loads("".join(printed)))
