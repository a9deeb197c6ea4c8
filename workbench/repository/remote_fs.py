"""fsspec file systems for remote repositories, with credentials found where Triton finds them.

Triton 2.51 (``core/src/filesystem/api.cc`` and ``implementations/{s3,gcs,as}.h``) reads
credentials from the JSON file named by ``TRITON_CLOUD_CREDENTIAL_PATH`` when that variable is
set (the entry whose name is the longest prefix of the path; no match is an error), and
otherwise from the environment:

- S3: ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``),
  ``AWS_DEFAULT_REGION``, ``AWS_PROFILE``, else the ``default`` profile; botocore reads the
  same variables and files, and ``AWS_ENDPOINT_URL[_S3]`` too. An endpoint in the URL
  (``s3://host:port/...``) wins, with path-style addressing as Triton's client uses.
- GCS: ``GOOGLE_APPLICATION_CREDENTIALS``, then the attached service account, then anonymous
  (gcsfs's ``token=None`` tries the same chain).
- Azure: ``AZURE_STORAGE_ACCOUNT`` (overrides the URL's account) and ``AZURE_STORAGE_KEY``;
  ``AZURE_STORAGE_AUTH_TYPE=managed_identity|default`` uses Azure identity; none is anonymous.

The back ends (s3fs, gcsfs, adlfs, from the ``cloud`` extra) are imported here, when a remote
repository is opened, never by ``import workbench``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.errors import InvalidArgumentError, MissingDependencyError
from workbench.repository.remote_url import RemoteUrl

#: the pip extra that installs every back end
EXTRA = "cloud"
#: where Triton copies a remote repository (``TRITON_*_MOUNT_DIRECTORY``; a temp folder inside)
MOUNT_DIRECTORY_VARIABLES = {
    "s3": "TRITON_AWS_MOUNT_DIRECTORY",
    "gs": "TRITON_GCS_MOUNT_DIRECTORY",
    "as": "TRITON_AZURE_MOUNT_DIRECTORY",
}
#: said with every failure to reach a remote repository: where credentials come from
CREDENTIAL_HINTS = {
    "s3": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN for temporary "
    "keys), AWS_PROFILE or ~/.aws/credentials; AWS_DEFAULT_REGION; an endpoint as "
    "s3://host:port/bucket/path or AWS_ENDPOINT_URL",
    "gs": "GOOGLE_APPLICATION_CREDENTIALS (a service-account or user JSON file), the attached "
    "service account, else anonymous access",
    "as": "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, or AZURE_STORAGE_AUTH_TYPE="
    "managed_identity|default, else anonymous access",
}
_CREDENTIAL_FILE = "TRITON_CLOUD_CREDENTIAL_PATH"


def open_filesystem(url: RemoteUrl, environ: Mapping[str, str] | None = None) -> Any:
    """A fresh fsspec file system for ``url`` (never fsspec's shared instance).

    Raises ``MissingDependencyError`` naming the ``cloud`` extra when the back end is not
    installed, and ``InvalidArgumentError`` for an unusable credential file.
    """
    env = os.environ if environ is None else environ
    credential = file_credential(url, env)
    if url.scheme == "s3":
        return _s3(url, env, credential)
    if url.scheme == "gs":
        return _gcs(env, credential)
    return _azure(url, env, credential)


def describe_failure(url: RemoteUrl, error: BaseException) -> str:
    """A message for a remote repository that cannot be read, naming where credentials come from."""
    where = f" (credentials from {_CREDENTIAL_FILE})" if _CREDENTIAL_FILE in os.environ else ""
    return (
        f"Unable to read model repository '{url.url}': {type(error).__name__}: {error}. "
        f"Check the account credentials{where} and the endpoint; they come from "
        f"{CREDENTIAL_HINTS[url.scheme]}"
    )


def file_credential(url: RemoteUrl, environ: Mapping[str, str]) -> Any:
    """The entry of Triton's credential file that applies to ``url``; ``None`` without a file.

    The entry is the one whose name is the longest prefix of the URL (``""`` matches all).
    """
    path = environ.get(_CREDENTIAL_FILE)
    if not path:
        return None
    try:
        entries = json.loads(Path(path).read_text()).get(url.scheme, {})
    except (OSError, ValueError, AttributeError) as exc:
        raise InvalidArgumentError(f"cannot read {_CREDENTIAL_FILE} '{path}': {exc}") from exc
    names = sorted((n for n in entries if url.url.startswith(n)), key=len, reverse=True)
    if not names:
        raise InvalidArgumentError(f"Cannot match credential for path {url.url} in '{path}'")
    return entries[names[0]]


def _s3(url: RemoteUrl, env: Mapping[str, str], credential: Any) -> Any:
    try:
        import s3fs
    except ImportError:
        raise MissingDependencyError("s3fs", EXTRA) from None
    options: dict[str, Any] = {"skip_instance_cache": True}
    client: dict[str, Any] = {}
    endpoint = url.endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        client["endpoint_url"] = endpoint
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION")
    if isinstance(credential, dict):
        region = credential.get("region") or region
        _s3_file_keys(credential, options)
    if region:
        client["region_name"] = region
    options["client_kwargs"] = client
    return s3fs.S3FileSystem(**options)


def _s3_file_keys(credential: Mapping[str, str], options: dict[str, Any]) -> None:
    """Keys from a credential-file entry: an access key pair first, else a profile."""
    if credential.get("key_id") and credential.get("secret_key"):
        options.update(key=credential["key_id"], secret=credential["secret_key"])
        if credential.get("session_token"):
            options["token"] = credential["session_token"]
    elif credential.get("profile"):
        options["profile"] = credential["profile"]


def _gcs(env: Mapping[str, str], credential: Any) -> Any:
    try:
        import gcsfs
    except ImportError:
        raise MissingDependencyError("gcsfs", EXTRA) from None
    token = credential if isinstance(credential, str) and credential else None
    token = token or env.get("GOOGLE_APPLICATION_CREDENTIALS") or None
    return gcsfs.GCSFileSystem(token=token, skip_instance_cache=True)


def _azure(url: RemoteUrl, env: Mapping[str, str], credential: Any) -> Any:
    try:
        import adlfs
    except ImportError:
        raise MissingDependencyError("adlfs", EXTRA) from None
    entry = credential if isinstance(credential, dict) else {}
    if credential is None:
        entry = {
            "account_str": env.get("AZURE_STORAGE_ACCOUNT", ""),
            "account_key": env.get("AZURE_STORAGE_KEY", ""),
            "auth_type": env.get("AZURE_STORAGE_AUTH_TYPE", ""),
        }
    options: dict[str, Any] = {
        "account_name": entry.get("account_str") or url.account,
        "skip_instance_cache": True,
    }
    if entry.get("auth_type") in ("managed_identity", "default"):
        options["anon"] = False  # adlfs then asks azure-identity's DefaultAzureCredential
    elif entry.get("account_key"):
        options["account_key"] = entry["account_key"]
    else:
        options["anon"] = True
    return adlfs.AzureBlobFileSystem(**options)
