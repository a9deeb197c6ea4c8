"""Model file uploads (``file:`` load parameters): switched off on request, and no leftovers.

A load carrying ``file:1/model.py`` makes the server run that file as its own user, so
``--allow-model-upload=false`` (``Server(allow_model_upload=False)``) refuses such loads before
anything is written, while loads from the repository and config-only overrides keep working.
Uploads that are allowed go to a temporary folder (as Triton's localize agent does) that is
deleted when the model is unloaded, replaced by a reload, fails to load, or the server stops.
"""

from __future__ import annotations

import json
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.core.conftest import ADD_MODEL, write_add_model
from workbench.server.hosting import Server

CONFIG = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 8,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
        "instance_group": [{"count": 1, "kind": "KIND_CPU"}],
    }
)
REFUSED = (
    "failed to load 'add', model file uploads ('file:' load parameters) are disabled on this "
    "server (--allow-model-upload=false)"
)


def _model_file(delta: float) -> dict[str, bytes]:
    return {"file:1/model.py": textwrap.dedent(ADD_MODEL.format(delta=delta, sleep=0)).encode()}


def _add(client: httpclient.InferenceServerClient) -> list[float]:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 4), np.float32))
    output = client.infer("add", [tensor]).as_numpy("OUTPUT0")
    assert output is not None
    return [float(v) for v in output[0]]


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder ``tempfile`` hands out, so that leftovers can be counted."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _overrides(root: Path) -> list[Path]:
    return sorted(root.glob("workbench-override-*"))


@pytest.fixture
def locked(tmp_path: Path, temp_root: Path) -> Iterator[Server]:
    repo = tmp_path / "repo"
    write_add_model(repo, "add", delta=1.0)
    server = Server(
        repo,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=["add"],
        allow_model_upload=False,
    )
    with server:
        yield server


def test_an_upload_is_refused_over_http_and_nothing_is_written(
    locked: Server, temp_root: Path
) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{locked.http_port}")
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("add", config=CONFIG, files=_model_file(100.0))
    assert refused.value.status() == "400" and refused.value.message() == REFUSED
    assert _overrides(temp_root) == []
    assert _add(client) == [1.0] * 4  # the repository's model still serves
    client.load_model("add")  # a load from the repository is still allowed
    client.load_model("add", config=CONFIG)  # and so is a config-only override
    assert _add(client) == [1.0] * 4


def test_an_upload_is_refused_over_grpc(locked: Server, temp_root: Path) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{locked.grpc_port}")
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("add", config=CONFIG, files=_model_file(100.0))
    assert refused.value.status() == str(grpc.StatusCode.INVALID_ARGUMENT)
    assert refused.value.message() == REFUSED
    assert _overrides(temp_root) == [] and client.is_model_ready("add")


def test_serve_flag_switches_uploads_off(tmp_path: Path) -> None:
    from workbench.cli import build_parser
    from workbench.server.cli import server_from_args

    def allowed(*flags: str) -> bool:
        args = build_parser().parse_args(["serve", f"--model-repository={tmp_path}", *flags])
        return server_from_args(args).options.core.allow_model_upload

    assert allowed() and allowed("--allow-model-upload=true")
    assert not allowed("--allow-model-upload=false")


def test_uploaded_folders_are_deleted_on_reload_unload_failure_and_stop(
    tmp_path: Path, temp_root: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    server = Server(repo, http_port=0, grpc_port=0, metrics_port=0, model_control_mode="explicit")
    with server:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
        for delta in range(30):
            client.load_model("add", config=CONFIG, files=_model_file(float(delta)))
            assert len(_overrides(temp_root)) == 1
        assert _add(client) == [29.0] * 4  # the last upload serves
        with pytest.raises(InferenceServerException, match="load failed for model 'add'"):
            client.load_model("add", config=CONFIG, files={"file:1/model.py": b"raise 1/0\n"})
        assert len(_overrides(temp_root)) == 1 and _add(client) == [29.0] * 4
        client.unload_model("add")
        assert _overrides(temp_root) == []
        client.load_model("add", config=CONFIG, files=_model_file(7.0))
        assert len(_overrides(temp_root)) == 1
    assert _overrides(temp_root) == []
