"""Serving a remote model repository, as tritonserver does, from each kind of store on loopback.

Every test runs against the three stores Triton reads, each emulated on loopback and named the
way a user names it (``tests/repository/object_store.py`` and its implementations):

- ``s3://127.0.0.1:<port>/<bucket>/models``, Triton's endpoint form, on moto's S3 server;
- ``gs://<bucket>/models`` on gcp-storage-emulator, which ``STORAGE_EMULATOR_HOST`` names;
- ``as://devstoreaccount1/<container>/models`` on Azurite (from the npm registry), which
  ``AZURE_STORAGE_CONNECTION_STRING`` names with its development account and key.

The model is the conformance repository's ``add_one``; a change in the bucket is a new
``model.py`` adding 2 instead.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as http
from tritonclient.utils import InferenceServerException

from tests.repository.azurite import Azurite, running_azurite
from tests.repository.gcs_server import GcsServer, running_gcs_server
from tests.repository.object_store import ADD_ONE, ObjectStore
from workbench.cli import main
from workbench.errors import NotFoundError
from workbench.server.hosting import Server

pytestmark = [
    pytest.mark.integration,
    # google-api-core, which gcsfs imports, warns that its support for Python 3.11 will end
    pytest.mark.filterwarnings("ignore:You are using a Python version:FutureWarning"),
]

ADD_TWO = (ADD_ONE / "1" / "model.py").read_bytes().replace(b"+ 1", b"+ 2")
#: bound on every wait for the poll loop (it polls every 0.2 s here); never a speed assertion
WAIT_S = 60.0


def _add(server: Server) -> float:
    """What ``add_one`` adds to zeros now (1 for the uploaded model, 2 once changed)."""
    client = http.InferenceServerClient(server.http_address)
    tensor = http.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
    return float(client.infer("add_one", [tensor]).as_numpy("OUTPUT0")[0, 0])


def _wait_for(condition: Callable[[], bool], what: str, server: Server) -> None:
    """Poll ``condition`` until it holds; a request failing meanwhile is a "not yet" (a poll
    may land between two uploads of one model and load it half-written, then again)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if condition():
                return
        except InferenceServerException:
            pass
        if time.monotonic() > deadline:
            index = http.InferenceServerClient(server.http_address).get_model_repository_index()
            pytest.fail(f"{what} not seen within {WAIT_S:.0f} s; index: {index}")
        time.sleep(0.1)


def _served(server: Server, value: float) -> Callable[[], bool]:
    return lambda: (
        server.core is not None and server.core.model_ready("add_one") and (_add(server) == value)
    )


def _states(client: http.InferenceServerClient) -> dict[str, str]:
    return {e["name"]: e.get("state", "") for e in client.get_model_repository_index()}


#: the fixture that runs each store, by the scheme of its URLs
_STORE_FIXTURES = {"s3": "s3", "gs": "gcs", "as": "azurite"}


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsServer]:
    """gcp-storage-emulator on loopback, for this module."""
    yield from running_gcs_server()


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite on loopback, for this module (installed from npm on first use)."""
    yield from running_azurite(tmp_path_factory.mktemp("azurite"))


@pytest.fixture(params=list(_STORE_FIXTURES))
def store(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> ObjectStore:
    """Each store in turn, with the environment pointing at it and at nothing else."""
    server: ObjectStore = request.getfixturevalue(_STORE_FIXTURES[request.param])
    server.isolate(monkeypatch, tmp_path)
    return server


@pytest.fixture
def bucket(store: ObjectStore) -> str:
    """A bucket (container) of ``store`` holding ``models/add_one``."""
    name = store.new_bucket()
    store.upload(ADD_ONE, name, "models/add_one")
    return name


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port some other socket listens on: a server that binds before it reads fails on it."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        yield holder.getsockname()[1]
    finally:
        holder.close()


def test_a_remote_repository_is_served_and_followed_in_poll_mode(
    store: ObjectStore, bucket: str
) -> None:
    server = Server(
        store.url(bucket),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        model_control_mode="poll",
        repository_poll_secs=0.2,
    )
    with server:
        assert server.core is not None
        (copy,) = server.core.repository.roots
        assert _add(server) == 1.0

        store.put(bucket, "models/add_one/1/model.py", ADD_TWO)
        _wait_for(_served(server, 2.0), "the changed model.py served", server)

        store.delete_prefix(bucket, "models/add_one/")
        client = http.InferenceServerClient(server.http_address)
        _wait_for(lambda: not copy.joinpath("add_one").exists(), "the copy updated", server)
        # as tritonserver 2.51: unloaded, and out of the index with its folder
        _wait_for(lambda: not client.is_model_ready("add_one"), "the unload", server)
        assert _states(client) == {}

        store.upload(ADD_ONE, bucket, "models/add_one")
        _wait_for(_served(server, 1.0), "the model uploaded again served", server)
    assert not copy.exists()  # the local copy is deleted at stop


def test_an_explicit_load_copies_the_model_afresh(store: ObjectStore, bucket: str) -> None:
    server = Server(
        store.url(bucket),
        http_port=0,
        allow_grpc=False,
        allow_metrics=False,
        model_control_mode="explicit",
    )
    with server:
        client = http.InferenceServerClient(server.http_address)
        assert not client.is_model_ready("add_one")
        client.load_model("add_one")
        assert _add(server) == 1.0
        store.put(bucket, "models/add_one/1/model.py", ADD_TWO)
        client.load_model("add_one")  # no poll: the load itself reads the bucket
        assert _add(server) == 2.0
        store.delete_prefix(bucket, "models/add_one/")
        with pytest.raises(InferenceServerException, match="failed to poll from model repo"):
            client.load_model("add_one")


def test_a_missing_bucket_is_reported_before_a_busy_port(
    store: ObjectStore, busy_port: int
) -> None:
    server = Server(store.url("no-such-bucket"), http_port=busy_port, allow_grpc=False)
    with pytest.raises(NotFoundError, match="(bucket|container) 'no-such-bucket' not found"):
        server.start()


def test_workbench_serve_reports_wrong_credentials_before_a_busy_port_and_exits_1(
    store: ObjectStore,
    bucket: str,
    busy_port: int,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = store.refuse_credentials(monkeypatch, tmp_path)
    url = store.url(bucket)
    status = main(["serve", "--model-repository", url, "--http-port", str(busy_port)])
    assert status == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: Unable to read model repository '{url}'")
    assert expected in error
