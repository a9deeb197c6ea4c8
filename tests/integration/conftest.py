"""Fixtures for tests that start servers on loopback: real Triton (and, later, the workbench).

Real Triton and perf_analyzer come from :mod:`tests.integration.peers`. Without network access
the peers cannot be downloaded and the tests that need them are skipped, unless
``WORKBENCH_REQUIRE_PEERS=1`` (set by CI), which turns that into a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.peers import (
    REPO_ROOT,
    Peers,
    PeersUnavailable,
    TritonServerProcess,
    copy_repository,
    prepare,
)

# moto's S3 server for the remote-repository tests (fixtures, asked for by name)
from tests.repository.s3_server import aws_environment, bucket, s3  # noqa: F401
from workbench.server.hosting import Server

CONFORMANCE_REPO = REPO_ROOT / "tests" / "assets" / "conformance_repo"
REQUIRE_PEERS_ENV = "WORKBENCH_REQUIRE_PEERS"


def _peers_required() -> bool:
    return os.environ.get(REQUIRE_PEERS_ENV, "") not in ("", "0")


@pytest.fixture(scope="session")
def peers() -> Peers:
    """tritonserver, its Python backend and perf_analyzer, downloaded once per cache folder."""
    try:
        return prepare()
    except PeersUnavailable as error:
        if error.offline and not _peers_required():
            last_line = str(error).strip().splitlines()[-1]
            pytest.skip(f"registry unreachable and {REQUIRE_PEERS_ENV} unset: {last_line}")
        pytest.fail(f"real Triton peers could not be prepared: {error}", pytrace=False)


@pytest.fixture(scope="session")
def real_triton(
    peers: Peers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServerProcess]:
    """Real tritonserver 2.51 serving a copy of ``tests/assets/conformance_repo`` on loopback.

    Every model is loaded (explicit model control), so the repository API works too; tests that
    unload a model must load it back.
    """
    workdir = tmp_path_factory.mktemp("real_triton")
    repository = copy_repository(CONFORMANCE_REPO, workdir / "conformance_repo")
    with TritonServerProcess(peers, repository, log_path=workdir / "tritonserver.log") as server:
        yield server


@pytest.fixture(scope="session")
def perf_analyzer(peers: Peers) -> Path:
    """Path of perf_analyzer 2.41; run it with ``peers.run_perf_analyzer(..., peers=peers)``."""
    if peers.perf_analyzer is None:
        pytest.fail("the tritonclient wheel carried no perf_analyzer", pytrace=False)
    return peers.perf_analyzer


# --- The workbench's own server --------------------------------------------------------------
# `embedded_server` (the lead's) goes here: the workbench serving CONFORMANCE_REPO on loopback,
# so that conformance tests can send the same request to it and to `real_triton`.


@pytest.fixture(scope="session")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The workbench's embedded server on the same repository and mode as ``real_triton``."""
    workdir = tmp_path_factory.mktemp("embedded")
    repository = copy_repository(CONFORMANCE_REPO, workdir / "conformance_repo")
    server = Server(
        repository,
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="explicit",
        load_model=["*"],
    )
    with server:
        yield server
