"""An S3-compatible server on loopback for the remote repository tests: moto in server mode.

It speaks S3's REST protocol on ``127.0.0.1`` and an ephemeral port, so s3fs and botocore
talk to it exactly as to a real bucket; nothing leaves the machine (the environment below
also turns off botocore's instance-metadata lookups and the user's ``~/.aws`` files).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.repository.object_store import ADD_ONE, ObjectStore

#: fake keys (moto accepts any) and a region, as a user's environment would hold them
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "workbench-test",
    "AWS_SECRET_ACCESS_KEY": "workbench-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
#: variables a developer's shell may carry that would change what botocore does
_CLEARED = (
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "TRITON_CLOUD_CREDENTIAL_PATH",
    "TRITON_AWS_MOUNT_DIRECTORY",
)


class S3Server(ObjectStore):
    """moto's S3 on loopback, with helpers to fill buckets through boto3."""

    scheme = "s3"

    def __init__(self) -> None:
        moto_server = pytest.importorskip("moto.server", reason="the test extra is not installed")
        self._server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.host = ""
        self.port = 0
        self._client: Any = None

    def start(self) -> S3Server:
        self._server.start()
        self.host, self.port = self._server.get_host_and_port()
        return self

    def stop(self) -> None:
        self._server.stop()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, bucket: str, prefix: str = "models") -> str:
        """The repository URL in Triton's endpoint form: ``s3://host:port/bucket/prefix``."""
        return f"s3://{self.host}:{self.port}/{bucket}/{prefix}".rstrip("/")

    def client(self) -> Any:
        if self._client is None:
            boto3 = pytest.importorskip("boto3")
            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
                aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            )
        return self._client

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=body)

    def delete_prefix(self, bucket: str, prefix: str) -> None:
        """Every object under ``prefix``, in one request (as ``aws s3 rm --recursive`` does)."""
        client = self.client()
        listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        keys = [{"Key": item["Key"]} for item in listed.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys})

    def isolate(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        isolate_aws_environment(monkeypatch, tmp_path)

    def refuse_credentials(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        return "Unable to locate credentials"


def isolate_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Only the test's credentials: no instance metadata, no ``~/.aws``, no endpoint variables."""
    for name in _CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))


def running_s3_server() -> Iterator[S3Server]:
    """Body of the module-scoped ``s3`` fixtures: one server for a test module."""
    pytest.importorskip("s3fs", reason="the cloud extra is not installed")
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    """moto's S3 server on loopback, for a test module."""
    yield from running_s3_server()


@pytest.fixture
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS settings of the machine leak in (modules ask for it with ``usefixtures``)."""
    isolate_aws_environment(monkeypatch, tmp_path)


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """A bucket holding ``models/add_one`` (the conformance repository's add-one model)."""
    name = s3.new_bucket()
    s3.upload(ADD_ONE, name, "models/add_one")
    return name
