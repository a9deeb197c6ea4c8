"""A Jupyter server (pytest-jupyter's ``jp_serverapp``) with the workbench extension enabled
and ``model_repository/`` under its root: a python ``add`` model, an ``echo`` model taking
any length, and a model whose ``initialize`` fails.

pytest-jupyter has no entry point: its fixtures are imported here, so they (and its autouse
loop and cleanup fixtures) apply to this folder only.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_server")
pytest.importorskip("pytest_jupyter")

from pytest_jupyter.jupyter_server import *  # noqa: E402, F403

from tests.core.conftest import write_add_model  # noqa: E402
from workbench.jupyter.host import ServerHost  # noqa: E402
from workbench.notebook import discovery  # noqa: E402

ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }]
"""
ECHO_MODEL = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
BROKEN_MODEL = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("broken on purpose")

    def execute(self, requests):
        return []
"""


def write_model(root: Path, name: str, config: str, model: str) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    (folder / "1" / "model.py").write_text(textwrap.dedent(model))
    return folder


@pytest.fixture
def repository(jp_root_dir: Path) -> Path:
    """``model_repository/`` under the Jupyter root: served without any setting."""
    root = jp_root_dir / "model_repository"
    root.mkdir(parents=True)
    write_add_model(root, "add")
    write_model(root, "echo", ECHO_CONFIG, ECHO_MODEL)
    broken = ECHO_CONFIG.replace('"echo"', '"broken"')
    write_model(root, "broken", broken, BROKEN_MODEL)
    return root


@pytest.fixture
def jp_server_config(repository: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"workbench": True}},
        "Workbench": {"stats_interval": 0.2},
    }


@pytest.fixture
def jp_base_url() -> str:
    """As JupyterHub serves a user's server."""
    return "/user/alice/"


@pytest.fixture(autouse=True)
def _restore_discovery_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extension sets ``WORKBENCH_DISCOVERY_FILE`` in this process; put it back after."""
    monkeypatch.setenv(discovery.ENV_VAR, "")


@pytest.fixture
def host(jp_serverapp: Any, jp_asyncio_loop: asyncio.AbstractEventLoop) -> ServerHost:
    """The extension's host, started as a real Jupyter server starts its extensions
    (``ServerApp._post_start``), and running."""
    jp_asyncio_loop.run_until_complete(jp_serverapp.extension_manager.start_all_extensions())
    server_host: ServerHost = jp_serverapp.web_app.settings["workbench_host"]
    settled = ("running", "failed")
    jp_asyncio_loop.run_until_complete(wait_for(lambda: server_host.state in settled))
    assert server_host.state == "running", server_host.status()
    return server_host


async def wait_for(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)
