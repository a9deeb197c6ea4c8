"""``c.Workbench.*``: which repository is served."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets import TraitError
from traitlets.config import Config

from workbench.jupyter.settings import Workbench


def test_the_default_repository_is_model_repository_under_the_root_when_it_exists(
    tmp_path: Path,
) -> None:
    settings = Workbench()
    assert settings.repository_path(tmp_path) is None
    (tmp_path / "model_repository").mkdir()
    assert settings.repository_path(tmp_path) == (tmp_path / "model_repository").resolve()


def test_a_configured_or_given_repository_is_taken_from_the_root(tmp_path: Path) -> None:
    config = Config({"Workbench": {"model_repository": "models", "engine": "tritonserver"}})
    settings = Workbench(config=config)
    assert settings.engine == "tritonserver" and settings.http_port == 0
    assert settings.repository_path(tmp_path) == (tmp_path / "models").resolve()
    assert settings.repository_path(tmp_path, "/elsewhere") == Path("/elsewhere")


def test_the_engine_may_be_the_url_of_a_triton_server_that_runs_elsewhere() -> None:
    remote = Workbench(config=Config({"Workbench": {"engine": "http://gpu-box:8000/"}}))
    assert remote.engine == "http://gpu-box:8000" and remote.remote_url == "http://gpu-box:8000"
    assert Workbench().remote_url is None
    with pytest.raises(TraitError, match=r"embedded, tritonserver or expected .*http://HOST:PORT"):
        Workbench(config=Config({"Workbench": {"engine": "gpu-box:8000"}}))
