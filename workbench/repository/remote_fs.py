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

Triton has no way to name another endpoint for ``gs://`` or ``as://``; the workbench takes
each SDK's own variable for it, so an emulator (fake-gcs-server, gcp-storage-emulator,
Azurite) or a private endpoint works:

- GCS: ``STORAGE_EMULATOR_HOST`` (``http://host:port``), as google-cloud-storage and gcsfs read
  it; without a credential file the emulator is used anonymously, as google-cloud-storage does.
- Azure: ``AZURE_STORAGE_CONNECTION_STRING`` (its ``BlobEndpoint`` and key), as the Azure CLI
  and SDKs read it; the account it names must be the repository's.

The back ends (s3fs, gcsfs, adlfs, from the ``cloud`` extra) are imported here, when a remote
repository is opened, never by ``import workbench``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.errors import InvalidArgumentError, MissingDependencyError, UnavailableError
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
    "service account, else anonymous access; an emulator's endpoint from STORAGE_EMULATOR_HOST",
    "as": "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY, or AZURE_STORAGE_AUTH_TYPE="
    "managed_identity|default, else anonymous access; an endpoint and key from "
    "AZURE_STORAGE_CONNECTION_STRING",
}
#: the SDKs' variables naming another endpoint (an emulator), which Triton cannot express
GCS_ENDPOINT_VARIABLE = "STORAGE_EMULATOR_HOST"
AZURE_CONNECTION_VARIABLE = "AZURE_STORAGE_CONNECTION_STRING"
_CREDENTIAL_FILE = "TRITON_CLOUD_CREDENTIAL_PATH"
_GCS_KEY_FILE = "GOOGLE_APPLICATION_CREDENTIALS"


def open_filesystem(url: RemoteUrl, environ: Mapping[str, str] | None = None) -> Any:
    """A fresh fsspec file system for ``url`` (never fsspec's shared instance).

    Raises ``MissingDependencyError`` naming the ``cloud`` extra when the back end is not
    installed, ``InvalidArgumentError`` for an unusable credential file or setting, and
    ``UnavailableError`` (naming where credentials come from) when the back end refuses them.
    """
    env = os.environ if environ is None else environ
    credential = file_credential(url, env)
    try:
        if url.scheme == "s3":
            return _s3(url, env, credential)
        if url.scheme == "gs":
            return _gcs(url, env, credential)
        return _azure(url, env, credential)
    except (MissingDependencyError, InvalidArgumentError):
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. gcsfs on a key file that is not JSON
        raise UnavailableError(describe_failure(url, exc)) from exc


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


def _gcs(url: RemoteUrl, env: Mapping[str, str], credential: Any) -> Any:
    try:
        import gcsfs
        from gcsfs.core import GCSFileSystem as JsonApiFileSystem
    except ImportError:
        raise MissingDependencyError("gcsfs", EXTRA) from None
    source = _CREDENTIAL_FILE if isinstance(credential, str) and credential else _GCS_KEY_FILE
    token = credential if source == _CREDENTIAL_FILE else env.get(_GCS_KEY_FILE) or None
    if token is not None and not Path(token).is_file():
        # gcsfs would take it for a raw OAuth token and send it to Google's tokeninfo endpoint
        raise InvalidArgumentError(
            f"Unable to read model repository '{url.url}': {source} names '{token}', which is "
            "not a readable file"
        )
    endpoint = env.get(GCS_ENDPOINT_VARIABLE, "")
    if endpoint in ("", "default"):
        return gcsfs.GCSFileSystem(token=token, skip_instance_cache=True)
    if "://" not in endpoint:
        endpoint = f"http://{endpoint}"  # as gcsfs and google-cloud-storage read it
    # An emulator: anonymous unless a key file is named, as google-cloud-storage does (which
    # also keeps google-auth from probing the GCE metadata server). gcsfs's default class
    # asks the gRPC Storage Control API for every bucket's layout, which emulators lack (a
    # 60 s timeout per request): the JSON API class is all that listing and reading need.
    return JsonApiFileSystem(token=token or "anon", endpoint_url=endpoint, skip_instance_cache=True)


def _azure(url: RemoteUrl, env: Mapping[str, str], credential: Any) -> Any:
    try:
        import adlfs
    except ImportError:
        raise MissingDependencyError("adlfs", EXTRA) from None
    connection = env.get(AZURE_CONNECTION_VARIABLE, "")
    if connection and credential is not None:
        # adlfs reads the variable itself and would prefer it to the file's key
        raise InvalidArgumentError(
            f"Unable to read model repository '{url.url}': both {_CREDENTIAL_FILE} and "
            f"{AZURE_CONNECTION_VARIABLE} are set; unset one of them"
        )
    if connection:
        account = env.get("AZURE_STORAGE_ACCOUNT") or url.account
        _check_connection_account(url, connection, account)
        return adlfs.AzureBlobFileSystem(connection_string=connection, skip_instance_cache=True)
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


def _check_connection_account(url: RemoteUrl, connection: str, account: str | None) -> None:
    """A connection string for another account than the repository's is a mistake, not a
    fallback: adlfs would read that account's container of the same name."""
    pairs = (part.partition("=") for part in connection.split(";"))
    fields = {name.strip().lower(): value.strip() for name, _, value in pairs}
    named = fields.get("accountname")
    if named and account and named != account:
        raise InvalidArgumentError(
            f"Unable to read model repository '{url.url}': {AZURE_CONNECTION_VARIABLE} is for "
            f"account '{named}', not '{account}'"
        )
