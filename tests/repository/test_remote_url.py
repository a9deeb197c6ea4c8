"""Remote repository URLs are split as tritonserver 2.51 splits them (core/src/filesystem)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.errors import InvalidArgumentError
from workbench.repository import RemoteUrl, is_remote_url, parse_remote_url


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "endpoint"),
    [
        ("s3://bucket", "bucket", "", None),
        ("s3://bucket/path/to/models", "bucket", "path/to/models", None),
        ("s3://bucket//path///models/", "bucket", "path/models", None),
        ("s3://minio:9000/bucket/models", "bucket", "models", "http://minio:9000"),
        ("s3://127.0.0.1:9000/bucket", "bucket", "", "http://127.0.0.1:9000"),
        ("s3://http://host.example:80/b/m", "b", "m", "http://host.example:80"),
        (
            "s3://https://s3.us-west-004.backblazeb2.com:443/my-bucket/models",
            "my-bucket",
            "models",
            "https://s3.us-west-004.backblazeb2.com:443",
        ),
    ],
)
def test_s3_urls_take_an_optional_endpoint_before_the_bucket(
    url: str, bucket: str, prefix: str, endpoint: str | None
) -> None:
    assert parse_remote_url(url) == RemoteUrl(url, "s3", bucket, prefix, endpoint=endpoint)


def test_gs_urls_are_a_bucket_and_a_path() -> None:
    parsed = parse_remote_url("gs://bucket/path/to/models/")
    assert parsed == RemoteUrl("gs://bucket/path/to/models/", "gs", "bucket", "path/to/models")
    assert parsed.fs_path == "bucket/path/to/models" and parsed.backend == "gcsfs"


@pytest.mark.parametrize(
    ("url", "account", "container", "prefix"),
    [
        ("as://account/container/path/models", "account", "container", "path/models"),
        ("as://account.blob.core.windows.net/container", "account", "container", ""),
        ("as://account/container/models?sv=token", "account", "container", "models"),
    ],
)
def test_as_urls_are_an_account_a_container_and_a_path(
    url: str, account: str, container: str, prefix: str
) -> None:
    parsed = parse_remote_url(url)
    assert parsed == RemoteUrl(url, "as", container, prefix, account=account)
    assert parsed.backend == "adlfs"


@pytest.mark.parametrize("path", ["/models", "models", "./s3://x", "file:///m", "S3://bucket"])
def test_other_paths_are_local(path: str) -> None:
    assert parse_remote_url(path) is None and not is_remote_url(path)


def test_a_path_object_is_always_local() -> None:
    assert parse_remote_url(Path("s3://bucket")) is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "No bucket name found in path: s3://"),
        ("s3:///", "No bucket name found in path"),
        ("gs://", "No bucket name found in path: gs://"),
        ("s3://minio:9000", "No bucket name found in path: s3://minio:9000"),
        ("s3://https://host/bucket", "the port is required"),
        ("as://account", "Invalid azure storage path: as://account"),
    ],
)
def test_malformed_remote_urls_are_refused_with_what_is_missing(url: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_remote_url(url)
