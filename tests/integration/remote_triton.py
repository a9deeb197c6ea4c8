"""Real tritonserver 2.51 standing in for a remote Triton: its own repository of add models."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.core.conftest import write_add_model
from tests.integration.peers import Peers, TritonServerProcess


def add_models_repository(
    tmp_path_factory: pytest.TempPathFactory, label: str, models: Sequence[str]
) -> Path:
    """``<tmp>/<label>/server_repo`` with one add model per name (the server's own copy)."""
    root = tmp_path_factory.mktemp(label) / "server_repo"
    root.mkdir()
    for name in models:
        write_add_model(root, name)
    return root


def serve_remote(peers: Peers, server_repo: Path) -> Iterator[TritonServerProcess]:
    """tritonserver in explicit model-control mode on ``server_repo``, every model loaded."""
    log = server_repo.parent / "tritonserver.log"
    with TritonServerProcess(peers, server_repo, log_path=log) as server:
        yield server


__all__ = ["add_models_repository", "serve_remote"]
