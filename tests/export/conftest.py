"""Fixtures: a copy of the example repository, real tritonserver when it can be prepared."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.server.hosting import Server

EXAMPLES = Path(__file__).resolve().parents[2] / "model_repository"
ALL_MODELS = sorted(p.parent.name for p in EXAMPLES.glob("*/config.pbtxt"))


def copy_examples(target: Path) -> Path:
    """The example repository (python, ONNX, TorchScript, ensemble), without bytecode."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "generate_models.py")
    shutil.copytree(EXAMPLES, target, ignore=ignore)
    return target


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (empty when it does not exist)."""
    if not folder.exists():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "source")


@pytest.fixture(scope="session")
def tritonserver_path() -> Path:
    """The real tritonserver 2.51 from the nvidia-pytriton wheel (skipped when offline)."""
    from tests.integration.peers import PeersUnavailable, prepare

    try:
        peers = prepare()
    except PeersUnavailable as error:
        pytest.skip(f"real tritonserver unavailable: {str(error).splitlines()[-1]}")
    return peers.tritonserver


@pytest.fixture
def served(source: Path) -> Iterator[Server]:
    """The embedded server on ``source``, every model loaded."""
    server = Server(
        source, http_port=0, grpc_port=0, metrics_port=0,
        model_control_mode="explicit", load_model=["*"],
    )  # fmt: skip
    with server:
        yield server
