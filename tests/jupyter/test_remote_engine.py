"""``c.Workbench.engine = "http://..."``: the extension drives a Triton server it did not start.

Real tritonserver 2.51 on loopback (explicit model control) stands in for the remote server,
serving its own copy of the repository; the Jupyter root holds the user's local copy.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import peers  # noqa: F401  (the fixture)
from tests.integration.peers import Peers, TritonServerProcess
from tests.integration.remote_triton import add_models_repository, serve_remote
from tests.jupyter.test_handlers import call
from tests.jupyter.test_sweeps import finished
from workbench.bench.scratch import SCRATCH_SUFFIX
from workbench.jupyter.host import ServerHost

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

MODELS = ("add", "tuned", "swept")


@pytest.fixture(scope="module")
def server_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_models_repository(tmp_path_factory, "remote_engine", MODELS)


@pytest.fixture(scope="module")
def remote(
    peers: Peers,  # noqa: F811
    server_repo: Path,
) -> Iterator[TritonServerProcess]:
    yield from serve_remote(peers, server_repo)


@pytest.fixture
def repository(jp_root_dir: Path, server_repo: Path) -> Path:
    """The user's local copy of the remote repository, where the extension finds it."""
    ignore = shutil.ignore_patterns("__pycache__")
    return Path(shutil.copytree(server_repo, jp_root_dir / "model_repository", ignore=ignore))


@pytest.fixture
def jp_server_config(repository: Path, remote: TritonServerProcess) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"workbench": True}},
        "Workbench": {"stats_interval": 0.2, "engine": f"http://{remote.http_url}"},
    }


def served(remote: TritonServerProcess, path: str) -> Any:
    """What tritonserver itself answers for ``GET <path>``."""
    with urllib.request.urlopen(f"http://{remote.http_url}{path}") as reply:
        body = reply.read()
    return json.loads(body) if body else None


async def test_status_shows_the_remote_server_and_a_kernel_attaches_to_it(
    jp_fetch: Any, host: ServerHost, remote: TritonServerProcess
) -> None:
    from workbench.notebook import Workbench

    status = await call(jp_fetch, "status")
    assert status["state"] == "running" and status["engine"] == "remote"
    assert status["remote_url"] == f"http://{remote.http_url}"
    assert status["endpoints"]["http_url"] == f"http://{remote.http_url}"
    assert status["endpoints"]["grpc_url"] is None and status["server_version"] == "2.51.0"
    assert any("remote: not started or stopped here" in line for line in status["log_tail"])
    models = {m["name"]: m["state"] for m in (await call(jp_fetch, "models"))["models"]}
    assert models == dict.fromkeys(MODELS, "READY")
    bench = Workbench.attach()
    assert bench.remote and bench.url == f"http://{remote.http_url}"
    bench.stop()


async def test_a_config_write_updates_the_local_copy_and_reaches_the_server_as_an_override(
    jp_fetch: Any,
    host: ServerHost,
    remote: TritonServerProcess,
    repository: Path,
    server_repo: Path,
) -> None:
    server_file = (server_repo / "tuned" / "config.pbtxt").read_text()
    text = (repository / "tuned" / "config.pbtxt").read_text()
    new = text.replace("max_batch_size: 8", "max_batch_size: 4")
    written = await call(jp_fetch, "models", "tuned", "config", method="PUT", body={"pbtxt": new})
    assert written["applied"] and "+max_batch_size: 4" in written["diff"]
    assert (repository / "tuned" / "config.pbtxt").read_text() == new
    assert (server_repo / "tuned" / "config.pbtxt").read_text() == server_file
    assert served(remote, "/v2/models/tuned/config")["max_batch_size"] == 4


async def test_stopping_disconnects_and_the_remote_server_keeps_serving(
    jp_fetch: Any, host: ServerHost, remote: TritonServerProcess
) -> None:
    stopped = await call(jp_fetch, "server", "stop", method="POST")
    assert stopped["state"] == "stopped" and stopped["endpoints"] is None
    assert served(remote, "/v2/health/live") is None  # 200, empty body
    started = await call(jp_fetch, "server", "start", method="POST")
    assert started["state"] == "running"


async def test_a_sweep_on_the_remote_loads_each_point_as_an_override_and_restores(
    jp_fetch: Any,
    host: ServerHost,
    remote: TritonServerProcess,
    repository: Path,
    server_repo: Path,
) -> None:
    before = served(remote, "/v2/models/swept/config")
    body = {"model": "swept", "max_batch_size": [2, 4], "concurrency": [1], "duration_s": 0.3}
    started = await call(jp_fetch, "sweeps", method="POST", body=body)
    sweep = await finished(jp_fetch, started["id"])
    assert sweep["state"] == "done" and sweep["done"] == 2
    rows = [dict(zip(sweep["columns"], row, strict=True)) for row in sweep["rows"]]
    assert all(row["throughput"] > 0 and row["error"] == "" for row in rows)
    assert served(remote, "/v2/models/swept/config") == before
    for repo in (repository, server_repo):
        assert not (repo / f"swept{SCRATCH_SUFFIX}").exists()
