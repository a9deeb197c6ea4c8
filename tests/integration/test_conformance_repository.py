"""Repository index and readiness side by side with tritonserver 2.51 (explicit mode).

- A model whose ``model.py`` raises at import fails at version 1: the load answers "version 1
  is at UNAVAILABLE state: Internal: RuntimeError: boom" with the python traceback, and the
  index lists the version with that reason.
- Unloading a model an ensemble uses unloads the ensemble too (UNAVAILABLE "unloaded", not
  ready, no statistics); loading the model again loads the ensemble again.

Traceback line numbers inside importlib differ by import path, so they are masked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.peers import Peers, TritonServerProcess, copy_repository
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.conformance]

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def _repository(root: Path) -> Path:
    copy_repository(ASSETS / "dependents_repo", root)
    copy_repository(ASSETS / "conformance_repo" / "add_one", root / "add_one")
    return root


@pytest.fixture(scope="module")
def urls(peers: Peers, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    workdir = tmp_path_factory.mktemp("repository")
    triton = TritonServerProcess(
        peers, _repository(workdir / "repo"), log_path=workdir / "triton.log", load_models=()
    )
    with triton:
        yield {"triton": f"http://{triton.http_url}", "root": str(workdir / "repo")}


def _masked(value: Any, root: str) -> Any:
    text = repr(value).replace(root, "<repo>")
    return re.sub(r"\((\d+)\): (_\w+)", r"(<line>): \2", text)


def _wait_unloaded(url: str, timeout_s: float = 60.0) -> None:
    """Until no model of the index is UNLOADING (an order of events, not a fixed sleep: a
    loaded machine showed tritonserver still unloading 1.5 s after the call)."""
    deadline = time.monotonic() + timeout_s
    while any(
        entry.get("state") == "UNLOADING"
        for entry in requests.post(f"{url}/v2/repository/index", data=b"").json()
    ):
        assert time.monotonic() < deadline, "the unload did not finish"
        time.sleep(0.05)


def _story(url: str) -> list[Any]:
    """Load add_one, ens and broken; unload add_one; load it again: what the server says."""
    seen: list[Any] = []

    def look(label: str) -> None:
        index = requests.post(f"{url}/v2/repository/index", data=b"").json()
        ready = requests.post(f"{url}/v2/repository/index", json={"ready": True}).json()
        stats = requests.get(f"{url}/v2/models/ens/stats")
        status = requests.get(f"{url}/v2/models/ens/ready").status_code
        seen.append([label, index, ready, status, stats.status_code, stats.json().get("error")])

    for model in ("add_one", "ens"):
        assert requests.post(f"{url}/v2/repository/models/{model}/load").status_code == 200
    broken = requests.post(f"{url}/v2/repository/models/broken/load")
    seen.append(["broken", broken.status_code, broken.json()])
    look("loaded")
    requests.post(f"{url}/v2/repository/models/add_one/unload")
    _wait_unloaded(url)  # tritonserver finishes an unload in the background
    look("add_one unloaded")
    requests.post(f"{url}/v2/repository/models/add_one/load")
    look("add_one loaded again")
    return seen


def test_failed_loads_and_ensembles_of_unloaded_models_as_triton(
    urls: dict[str, str], tmp_path: Path
) -> None:
    ours_root = _repository(tmp_path / "repo")
    with Server(
        ours_root, http_port=0, grpc_port=0, metrics_port=0, model_control_mode="explicit"
    ) as ours:
        ours_story = _masked(_story(ours.url), str(ours_root))
    assert ours_story == _masked(_story(urls["triton"]), urls["root"])
    assert "'version': '1', 'state': 'UNAVAILABLE', 'reason': 'Internal: RuntimeError: boom" in (
        ours_story
    )
