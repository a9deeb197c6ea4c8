"""Repository index and readiness side by side with tritonserver 2.51 (explicit mode).

- A model whose ``model.py`` raises at import fails at version 1: the load answers "version 1
  is at UNAVAILABLE state: Internal: RuntimeError: boom" with the python traceback, and the
  index lists the version with that reason.
- Unloading a model an ensemble uses unloads the ensemble too (UNAVAILABLE "unloaded", not
  ready, no statistics); loading the model again loads the ensemble again.
- The index lists the models of the repository's folders only: not a model still serving after
  its folder went, nor one loaded from ``file:`` contents.
- In poll mode, removing a model's folder unloads it and the ensembles that use it (the model
  leaves the index, the ensemble is UNAVAILABLE "unloaded"); putting it back loads both afresh.

Traceback line numbers inside importlib differ by import path, so they are masked.
"""

from __future__ import annotations

import base64
import compileall
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
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


def _ours(tmp_path: Path, story: Callable[[str, Path], Any]) -> tuple[Any, str]:
    """``story(url, root)`` told by our server in explicit mode on a repository like the
    Triton fixture's; with the root, for masking."""
    root = _repository(tmp_path / "repo")
    with Server(
        root, http_port=0, grpc_port=0, metrics_port=0, model_control_mode="explicit"
    ) as ours:
        return story(ours.url, root), str(root)


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
    told, root = _ours(tmp_path, lambda url, _: _story(url))
    ours_story = _masked(told, root)
    assert ours_story == _masked(_story(urls["triton"]), urls["root"])
    assert "'version': '1', 'state': 'UNAVAILABLE', 'reason': 'Internal: RuntimeError: boom" in (
        ours_story
    )


def _settled_copy(source: Path, destination: Path) -> None:
    """``source`` copied with its Python compiled ahead and every time stamp in the past.

    Else tritonserver's stub writes ``__pycache__`` into the folder while loading it, and its
    next poll takes that for a change and loads the model again, racing what the test does.
    """
    staging = destination.parent / f".{destination.name}.staging"
    copy_repository(source, staging)
    past = time.time() - 600
    for path in staging.rglob("*"):
        os.utime(path, (past, past))
    compileall.compile_dir(str(staging), quiet=1)
    for path in [staging, *staging.rglob("*")]:
        os.utime(path, (past, past))
    staging.rename(destination)  # the poll sees the whole folder at once


def _poll_until(check: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _poll_story(url: str, root: Path) -> list[Any]:
    """Serve add_one and ens in poll mode; remove add_one's folder; put it back."""
    add_one = ASSETS / "conformance_repo" / "add_one"
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}
    seen: list[Any] = []

    def index() -> list[dict[str, Any]]:
        return list(requests.post(f"{url}/v2/repository/index", data=b"").json())

    def state(name: str) -> str | None:
        return next((e.get("state") for e in index() if e["name"] == name), None)

    def look(label: str) -> None:
        # the count before this look's inference: 0 once ens is loaded afresh, and still 0 if
        # tritonserver loads it once more a poll later (seen in CI: a second load after the
        # folder came back)
        stats = requests.get(f"{url}/v2/models/ens/stats")
        count = None
        if stats.status_code == 200:
            count = stats.json()["model_stats"][0]["inference_stats"]["success"]["count"]
        infer = requests.post(f"{url}/v2/models/ens/infer", json=body)
        seen.append(
            [
                label,
                index(),
                requests.get(f"{url}/v2/models/ens/ready").status_code,
                requests.get(f"{url}/v2/models/add_one/ready").status_code,
                infer.status_code,
                infer.json().get("error"),
                count,
            ]
        )

    _poll_until(lambda: state("ens") == "READY", "the ensemble did not load")
    look("served")
    shutil.rmtree(root / "add_one")
    _poll_until(lambda: state("ens") != "READY", "the removal was not seen")
    _wait_unloaded(url)
    look("add_one removed")
    _settled_copy(add_one, root / "add_one")
    _poll_until(lambda: state("ens") == "READY", "the ensemble did not come back")
    look("add_one back")  # the ensemble's statistics start afresh: it was loaded again
    return seen


def test_poll_mode_takes_a_removed_model_and_its_ensembles_down_as_triton(
    peers: Peers, tmp_path: Path
) -> None:
    stories = []
    for engine in ("triton", "ours"):
        root = tmp_path / engine
        root.mkdir()
        _settled_copy(ASSETS / "dependents_repo" / "ens", root / "ens")
        _settled_copy(ASSETS / "conformance_repo" / "add_one", root / "add_one")
        if engine == "triton":
            with TritonServerProcess(
                peers,
                root,
                log_path=tmp_path / "triton.log",
                model_control_mode="poll",
                load_models=(),
                extra_args=["--repository-poll-secs=1"],
            ) as triton:
                stories.append(_poll_story(f"http://{triton.http_url}", root))
        else:
            with Server(
                root,
                http_port=0,
                grpc_port=0,
                metrics_port=0,
                model_control_mode="poll",
                repository_poll_secs=1,
            ) as ours:
                stories.append(_poll_story(ours.url, root))
    theirs, ours_story = stories
    assert ours_story == theirs
    removed = ours_story[1]
    assert [e["name"] for e in removed[1]] == ["ens"]  # add_one left the index
    assert removed[1][0]["reason"] == "unloaded" and removed[2] == 400
    assert ours_story[0][-1] == 0 and ours_story[2][-1] == 0  # served once since: loaded afresh


def test_the_index_lists_only_the_repository_folders_as_triton(
    urls: dict[str, str], tmp_path: Path
) -> None:
    """A model loaded from ``file:`` contents, and one whose folder went while it served."""
    model_py = (ASSETS / "conformance_repo" / "add_one" / "1" / "model.py").read_bytes()
    config = {
        "name": "uploaded",
        "backend": "python",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    }
    upload = {
        "parameters": {
            "config": json.dumps(config),
            "file:1/model.py": base64.b64encode(model_py).decode(),
        }
    }

    def story(url: str, root: Path) -> list[Any]:
        shutil.copytree(root / "add_one", root / "gone")
        text = (root / "gone" / "config.pbtxt").read_text()
        (root / "gone" / "config.pbtxt").write_text(text.replace('"add_one"', '"gone"'))
        seen: list[Any] = []
        try:
            for model, request in (("uploaded", upload), ("gone", None)):
                answer = requests.post(f"{url}/v2/repository/models/{model}/load", json=request)
                seen.append([model, answer.status_code])
            shutil.rmtree(root / "gone")
            index = requests.post(f"{url}/v2/repository/index", data=b"").json()
            seen.append(sorted(e["name"] for e in index))
            for model in ("uploaded", "gone"):
                seen.append([model, requests.get(f"{url}/v2/models/{model}/ready").status_code])
        finally:  # the Triton of this module serves the next tests from the same folder
            shutil.rmtree(root / "gone", ignore_errors=True)
            for model in ("uploaded", "gone"):
                requests.post(f"{url}/v2/repository/models/{model}/unload")
            _wait_unloaded(url)
        return seen

    ours_story, _ = _ours(tmp_path, story)
    theirs = story(urls["triton"], Path(urls["root"]))
    assert ours_story == theirs
    assert "uploaded" not in ours_story[2] and "gone" not in ours_story[2]
    assert ["uploaded", 200] in ours_story[3:] and ["gone", 200] in ours_story[3:]


def _reload_story(url: str, root: Path) -> list[Any]:
    """add_one and ens loaded; add_one loaded again with its input renamed (ens no longer
    fits it), then with its config restored: what the server says after each."""
    body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1, 16], "data": [0.0] * 16}]}
    config = root / "add_one" / "config.pbtxt"
    original = config.read_text()
    seen: list[Any] = []

    def look(label: str) -> None:
        index = requests.post(f"{url}/v2/repository/index", data=b"").json()
        index = [e for e in index if e["name"] in ("add_one", "ens")]  # (earlier tests' loads)
        infer = requests.post(f"{url}/v2/models/ens/infer", json=body)
        stats = requests.get(f"{url}/v2/models/ens/stats")
        count = None
        if stats.status_code == 200:
            count = stats.json()["model_stats"][0]["inference_stats"]["success"]["count"]
        ready = requests.get(f"{url}/v2/models/ens/ready").status_code
        seen.append([label, index, ready, infer.status_code, infer.json().get("error"), count])

    try:
        for model in ("add_one", "ens"):
            assert requests.post(f"{url}/v2/repository/models/{model}/load").status_code == 200
        look("loaded")
        config.write_text(original.replace('"INPUT0"', '"RENAMED"'))
        seen.append(requests.post(f"{url}/v2/repository/models/add_one/load").status_code)
        _wait_unloaded(url)
        look("add_one's input renamed")
        config.write_text(original)
        seen.append(requests.post(f"{url}/v2/repository/models/add_one/load").status_code)
        look("add_one restored")  # ens loaded again: its statistics start afresh
    finally:
        config.write_text(original)
        for model in ("ens", "add_one"):
            requests.post(f"{url}/v2/repository/models/{model}/unload")
        _wait_unloaded(url)
    return seen


def test_an_ensemble_is_loaded_again_with_its_step_and_unloaded_when_it_no_longer_fits(
    urls: dict[str, str], tmp_path: Path
) -> None:
    ours_story, root = _ours(tmp_path, _reload_story)
    theirs = _reload_story(urls["triton"], Path(urls["root"]))
    assert _masked(ours_story, root) == _masked(theirs, urls["root"])
    renamed = ours_story[2]
    ens = next(e for e in renamed[1] if e["name"] == "ens")
    assert ens["state"] == "UNAVAILABLE" and ens["reason"] == "unloaded" and renamed[2] == 400
    assert ours_story[-1][-1] == 1  # one inference since ens came back
