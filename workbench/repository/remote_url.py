"""Remote ``--model-repository`` locations (``s3://``, ``gs://``, ``as://``), parsed as Triton does.

Triton 2.51 picks a file system by the path's prefix (``FileSystemManager::GetFileSystem`` in
``core/src/filesystem/api.cc``) and parses each kind in its implementation:

- ``s3://bucket/path``, or ``s3://[http://|https://]host:port/bucket/path`` for a private
  or S3-compatible endpoint (HTTP unless ``https://`` is given; ``S3FileSystem::CleanPath``
  and the regex in ``implementations/s3.h``: repeated slashes collapse, trailing ones go);
- ``gs://bucket/path`` (``implementations/gcs.h``);
- ``as://account/container/path`` (``AS_URL_PATTERN`` in ``implementations/as.h``; the account
  may be written ``account.blob.core.windows.net``).

Pure parsing, no I/O: any other string is a local path and gets ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeGuard

from workbench.errors import InvalidArgumentError

#: the URL prefixes Triton treats as remote, and the fsspec back end each one needs
SCHEMES = {"s3": "s3fs", "gs": "gcsfs", "as": "adlfs"}
#: ``host:port`` as the first part of an S3 path: a private endpoint (bucket names have no ``:``)
_ENDPOINT = re.compile(r"(?P<host>[0-9A-Za-z\-.]+):(?P<port>[0-9]+)")
_AZURE_HOST_SUFFIX = ".blob.core.windows.net"


@dataclass(frozen=True)
class RemoteUrl:
    """One remote repository root, split into what an fsspec file system needs."""

    #: the URL as the user gave it (for messages)
    url: str
    #: ``s3``, ``gs`` or ``as``
    scheme: str
    #: the bucket (S3, GCS) or the container (Azure)
    bucket: str
    #: the key prefix inside the bucket, without leading or trailing slashes; ``""`` at the root
    prefix: str = ""
    #: S3 only: ``http://host:port`` or ``https://host:port`` from the URL, else ``None``
    endpoint: str | None = None
    #: Azure only: the storage account named in the URL
    account: str | None = None

    @property
    def fs_path(self) -> str:
        """The root as fsspec paths spell it: ``bucket/prefix``."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    @property
    def backend(self) -> str:
        """The fsspec back-end package this scheme needs (``s3fs``, ``gcsfs``, ``adlfs``)."""
        return SCHEMES[self.scheme]


def is_remote_url(path: object) -> TypeGuard[str]:
    """Whether ``path`` names a remote repository (a string starting ``s3://``, ``gs://``, ``as://``)."""
    return isinstance(path, str) and any(path.startswith(f"{s}://") for s in SCHEMES)


def parse_remote_url(path: object) -> RemoteUrl | None:
    """The parts of a remote repository URL; ``None`` for a local path.

    Raises ``InvalidArgumentError`` for a remote URL Triton would not accept (no bucket, an
    endpoint without a port, an Azure URL without a container).
    """
    if not is_remote_url(path):
        return None
    scheme, rest = path.split("://", 1)
    if scheme == "s3":
        return _parse_s3(path, rest)
    parts = _clean(path, rest).split("/", 1)
    if scheme == "gs":
        return RemoteUrl(path, "gs", parts[0], parts[1] if len(parts) > 1 else "")
    return _parse_azure(path, rest)


def _parse_s3(url: str, rest: str) -> RemoteUrl:
    protocol = next((p for p in ("https://", "http://") if rest.startswith(p)), "")
    parts = _clean(url, rest[len(protocol) :]).split("/", 2)
    endpoint = _ENDPOINT.fullmatch(parts[0])
    if protocol and endpoint is None:
        raise InvalidArgumentError(
            f"invalid S3 model repository '{url}': an endpoint is written "
            f"s3://{protocol}host:port/bucket/path (the port is required)"
        )
    if endpoint is None:
        return RemoteUrl(url, "s3", parts[0], "/".join(parts[1:]))
    if len(parts) < 2:
        raise InvalidArgumentError(f"No bucket name found in path: {url}")  # Triton's words
    prefix = parts[2] if len(parts) > 2 else ""
    return RemoteUrl(url, "s3", parts[1], prefix, endpoint=(protocol or "http://") + parts[0])


def _parse_azure(url: str, rest: str) -> RemoteUrl:
    # AS_URL_PATTERN: account / container / optional blob path (a '?query' is dropped)
    parts = _clean(url, rest.split("?", 1)[0]).split("/", 2)
    if len(parts) < 2:
        raise InvalidArgumentError(
            f"Invalid azure storage path: {url} (expected as://account/container/path)"
        )
    account = parts[0].removesuffix(_AZURE_HOST_SUFFIX)
    return RemoteUrl(url, "as", parts[1], parts[2] if len(parts) > 2 else "", account=account)


def _clean(url: str, rest: str) -> str:
    """``rest`` without leading, trailing or repeated slashes (``S3FileSystem::CleanPath``)."""
    cleaned = "/".join(part for part in rest.split("/") if part)
    if not cleaned:
        raise InvalidArgumentError(f"No bucket name found in path: {url}")
    return cleaned
