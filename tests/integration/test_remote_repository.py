"""Serving an ``s3://`` model repository, as tritonserver does, from an S3 server on loopback.

moto's server mode stands in for S3 (s3fs cannot tell the difference); the repository URL is
Triton's endpoint form ``s3://127.0.0.1:<port>/<bucket>/models``. The model is the conformance
repository's ``add_one``; a change in the bucket is a new ``model.py`` adding 2 instead.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.http as http
from tritonclient.utils import InferenceServerException

from tests.repository.s3_server import ADD_ONE, S3Server
from workbench.cli import main
from workbench.errors import NotFoundError
from workbench.server.hosting import Server

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("aws_environment")]

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


def test_an_s3_repository_is_served_and_followed_in_poll_mode(s3: S3Server, bucket: str) -> None:
    server = Server(
        s3.url(bucket),
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

        s3.put(bucket, "models/add_one/1/model.py", ADD_TWO)
        _wait_for(_served(server, 2.0), "the changed model.py served", server)

        s3.delete_prefix(bucket, "models/add_one/")
        client = http.InferenceServerClient(server.http_address)
        _wait_for(lambda: not copy.joinpath("add_one").exists(), "the copy updated", server)
        _wait_for(lambda: _states(client) == {"add_one": "UNAVAILABLE"}, "the unload", server)
        assert not client.is_model_ready("add_one")

        s3.upload(ADD_ONE, bucket, "models/add_one")
        _wait_for(_served(server, 1.0), "the model uploaded again served", server)
    assert not copy.exists()  # the local copy is deleted at stop


def test_an_explicit_load_copies_the_model_afresh(s3: S3Server, bucket: str) -> None:
    server = Server(
        s3.url(bucket),
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
        s3.put(bucket, "models/add_one/1/model.py", ADD_TWO)
        client.load_model("add_one")  # no poll: the load itself reads the bucket
        assert _add(server) == 2.0
        s3.delete_prefix(bucket, "models/add_one/")
        with pytest.raises(InferenceServerException, match="failed to poll from model repo"):
            client.load_model("add_one")


def test_a_missing_bucket_is_reported_before_a_busy_port(s3: S3Server) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    try:
        port = holder.getsockname()[1]
        server = Server(s3.url("no-such-bucket"), http_port=port, allow_grpc=False)
        with pytest.raises(NotFoundError, match="bucket 'no-such-bucket' not found"):
            server.start()
    finally:
        holder.close()


def test_workbench_serve_reports_missing_credentials_and_exits_1(
    s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    status = main(["serve", "--model-repository", s3.url(bucket), "--http-port", "0"])
    assert status == 1
    error = capsys.readouterr().err
    assert error.startswith(f"error: Unable to read model repository '{s3.url(bucket)}'")
    assert "Unable to locate credentials" in error and "AWS_SECRET_ACCESS_KEY" in error
