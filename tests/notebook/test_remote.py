"""``Workbench.connect``: real tritonserver 2.51 on loopback stands in for a remote Triton.

The server serves its own copy of the repository (``server_repo``); the tests work from a
separate local copy (``local_repo``), as a user with a GPU box does. Nothing here writes the
server's copy: what it serves changes only through the load API.
"""

from __future__ import annotations

import json
import shutil
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.core.conftest import write_add_model
from tests.integration.conftest import peers  # noqa: F401  (the fixture)
from tests.integration.peers import Peers, TritonServerProcess
from tests.integration.remote_triton import add_models_repository, serve_remote
from workbench.bench import Endpoints, Progress, sweep
from workbench.bench.scratch import SCRATCH_SUFFIX
from workbench.errors import (
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
    WorkbenchError,
)
from workbench.notebook import Workbench
from workbench.notebook.remote import ModelControlRefused, server_address

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

MODELS = ("add", "edited", "refused", "swept", "swept_best")


@pytest.fixture(scope="module")
def server_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_models_repository(tmp_path_factory, "remote", MODELS)


@pytest.fixture(scope="module")
def remote(
    peers: Peers,  # noqa: F811
    server_repo: Path,
) -> Iterator[TritonServerProcess]:
    yield from serve_remote(peers, server_repo)


@pytest.fixture(scope="module")
def local_repo(server_repo: Path) -> Path:
    return Path(shutil.copytree(server_repo, server_repo.parent / "local_repo"))


@pytest.fixture(scope="module")
def bench(remote: TritonServerProcess, local_repo: Path) -> Iterator[Workbench]:
    connected = Workbench.connect(f"http://{remote.http_url}", repository=local_repo)
    try:
        yield connected
    finally:
        connected.stop()


def served_config(remote: TritonServerProcess, name: str) -> dict[str, Any]:
    """What tritonserver itself answers for ``GET /v2/models/<name>/config``."""
    with urllib.request.urlopen(f"http://{remote.http_url}/v2/models/{name}/config") as reply:
        return dict(json.loads(reply.read()))


def test_connect_drives_the_remote_models(bench: Workbench, remote: TritonServerProcess) -> None:
    assert bench.running and bench.remote and bench.engine == "remote"
    assert bench.server.version == "2.51.0"
    assert bench.url == f"http://{remote.http_url}" and bench.grpc_url is None
    models = bench.models().set_index("name")
    assert set(models.index) == set(MODELS) and set(models["state"]) == {"READY"}
    out = bench.infer("add", {"INPUT0": np.ones((1, 4), dtype=np.float32)})
    assert out["OUTPUT0"].tolist() == [[2.0, 2.0, 2.0, 2.0]]
    with pytest.raises(UnsupportedError, match="cannot read: copy the model into its repository"):
        bench.add_onnx("model.onnx", "new")


def test_apply_writes_the_local_copy_and_loads_it_as_an_override(
    bench: Workbench, remote: TritonServerProcess, server_repo: Path, local_repo: Path
) -> None:
    server_file = (server_repo / "edited" / "config.pbtxt").read_text()
    editor = bench.edit("edited")
    editor.set("max_batch_size", 4)
    editor.apply()
    assert "max_batch_size: 4" in (local_repo / "edited" / "config.pbtxt").read_text()
    assert (server_repo / "edited" / "config.pbtxt").read_text() == server_file
    # what real Triton answers after the override load: the new config, same version READY
    assert served_config(remote, "edited")["max_batch_size"] == 4
    index = [e for e in bench.http.index() if e["name"] == "edited"]
    assert index == [{"name": "edited", "version": "1", "state": "READY"}]
    # Triton 2.51: a plain load keeps the override while the server's files are unchanged
    bench.load("edited")
    assert bench.config("edited").max_batch_size == 4


def test_an_override_the_server_cannot_load_keeps_the_previous_config(
    bench: Workbench, remote: TritonServerProcess, local_repo: Path
) -> None:
    local_file = (local_repo / "refused" / "config.pbtxt").read_text()
    editor = bench.edit("refused")
    editor.pbtxt = local_file.replace("max_batch_size: 8", "max_batch_size: 2").replace(
        "KIND_CPU", "KIND_GPU"
    )
    with pytest.raises(UnavailableError, match="previous configuration keeps serving") as caught:
        editor.apply()
    # tritonserver 2.51's own words, from the load's 400 reply
    assert "kind KIND_GPU but no GPUs are available" in str(caught.value)
    assert (local_repo / "refused" / "config.pbtxt").read_text() == local_file
    assert served_config(remote, "refused")["max_batch_size"] == 8
    assert bench.models().set_index("name").loc["refused", "state"] == "READY"


def test_a_sweep_loads_each_point_as_an_override_and_then_what_served_before(
    bench: Workbench, remote: TritonServerProcess, server_repo: Path, local_repo: Path
) -> None:
    before = served_config(remote, "swept")
    seen: list[tuple[int, int]] = []

    def listener(progress: Progress) -> None:  # between measurements: the point is loaded
        serving = served_config(remote, "swept")["max_batch_size"]
        seen.append((progress.row["max_batch_size"], serving))

    result = sweep(
        "swept",
        local_repo / "swept",
        Endpoints(remote.http_url, None),
        settings={"max_batch_size": [2, 4]},
        concurrency=[1],
        duration_s=0.3,
        warmup_s=0.05,
        listeners=[listener],
    )
    assert [row["error"] for row in result.rows] == ["", ""]
    assert all(row["throughput"] > 0 for row in result.rows)
    assert seen == [(2, 2), (4, 4)]
    assert served_config(remote, "swept") == before
    for repo in (server_repo, local_repo):
        assert not (repo / f"swept{SCRATCH_SUFFIX}").exists()


def test_bench_sweep_on_a_remote_server_and_apply_best(
    bench: Workbench, remote: TritonServerProcess, local_repo: Path
) -> None:
    result = bench.sweep(
        "swept_best", instance_count=[1, 2], concurrency=[2], duration_s=0.3, live=False
    )
    assert len(result.df) == 2 and (result.df["error"] == "").all()
    assert result.df["host_cpu"].isna().all()  # this machine's CPU is not the server's
    assert served_config(remote, "swept_best")["instance_group"][0]["count"] == 1
    best = result.apply_best()
    count = best.settings["instance_count"]
    assert f"count: {count}" in (local_repo / "swept_best" / "config.pbtxt").read_text()
    assert served_config(remote, "swept_best")["instance_group"][0]["count"] == count


@pytest.fixture(scope="module")
def polling_remote(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    """tritonserver in ``none`` model-control mode (loads everything, refuses the load API)."""
    root = tmp_path_factory.mktemp("polling") / "repo"
    root.mkdir()
    write_add_model(root, "add")
    with TritonServerProcess(peers, root, model_control_mode="none") as server:
        yield server.http_url


def test_a_server_not_in_explicit_mode_is_refused_with_tritons_message(
    polling_remote: str, tmp_path: Path
) -> None:
    local = tmp_path / "repo"
    write_add_model(local, "add")
    bench = Workbench.connect(f"http://{polling_remote}", repository=local)
    assert bench.models().set_index("name").loc["add", "state"] == "READY"
    for action in (lambda: bench.load("add"), lambda: bench.unload("add")):
        with pytest.raises(ModelControlRefused) as caught:
            action()
        message = str(caught.value)
        assert "explicit model load / unload is not allowed if polling is enabled" in message
        assert "--model-control-mode=explicit" in message
    assert isinstance(caught.value, WorkbenchError)
    bench.stop()
    assert not bench.running


def test_connect_refuses_what_is_not_a_live_triton_url(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    with pytest.raises(
        UnavailableError, match=f"no Triton server answers at http://127.0.0.1:{closed}"
    ):
        Workbench.connect(f"http://127.0.0.1:{closed}", repository=tmp_path)
    for url in ("https://host:8000", "http://host", "host:8000", "http://host:8000/v2"):
        with pytest.raises(InvalidArgumentError, match="http://HOST:PORT"):
            server_address(url)
    assert server_address("http://gpu-box:8000/") == "gpu-box:8000"
