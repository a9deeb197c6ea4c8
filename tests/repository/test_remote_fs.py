"""Each remote scheme reaches its fsspec back end with the credentials Triton would use.

The back ends are replaced by recorders here (no network: gcsfs and adlfs would otherwise
ask cloud metadata servers for credentials); the S3 path against a real S3-compatible server
is in ``test_remote_mirror.py``, and each store against its emulator in
``tests/integration/test_remote_repository.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from workbench.errors import InvalidArgumentError, MissingDependencyError, UnavailableError
from workbench.repository import ModelRepository, parse_remote_url
from workbench.repository.remote_fs import open_filesystem
from workbench.server.hosting import Server


class _Recorder:
    """Stands in for a back end's file-system class: keeps the keywords it was built with."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class _JsonApiRecorder(_Recorder):
    """Stands in for ``gcsfs.core.GCSFileSystem``, the class without gRPC bucket lookups."""


@pytest.fixture
def backends(monkeypatch: pytest.MonkeyPatch) -> None:
    for module, cls in (
        ("s3fs", "S3FileSystem"),
        ("gcsfs", "GCSFileSystem"),
        ("adlfs", "AzureBlobFileSystem"),
    ):
        monkeypatch.setitem(sys.modules, module, SimpleNamespace(**{cls: _Recorder}))
    monkeypatch.setitem(sys.modules, "gcsfs.core", SimpleNamespace(GCSFileSystem=_JsonApiRecorder))


@pytest.fixture
def key_file(tmp_path: Path) -> str:
    """A credential file that exists (gcsfs is a recorder: its content is never read)."""
    path = tmp_path / "service-account.json"
    path.write_text("{}")
    return str(path)


def _options(url: str, environ: dict[str, str]) -> dict[str, Any]:
    parsed = parse_remote_url(url)
    assert parsed is not None
    fs = open_filesystem(parsed, environ)
    assert isinstance(fs, _Recorder)
    return fs.kwargs


@pytest.mark.parametrize(
    ("url", "module"),
    [("gs://bucket/models", "gcsfs"), ("as://account/container/models", "adlfs")],
)
def test_a_missing_back_end_names_the_extra_that_installs_it(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    message = f"{module} is not installed; install it with: pip install 'triton-workbench[cloud]'"
    with pytest.raises(MissingDependencyError, match=re.escape(message)):
        ModelRepository(url)


def test_a_missing_back_end_fails_the_server_start_before_any_port_is_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    server = Server("gs://bucket/models", http_port=0, grpc_port=0, metrics_port=0)
    with pytest.raises(MissingDependencyError, match="gcsfs"):
        server.start()
    assert server._socket is None and not server.running


@pytest.mark.usefixtures("backends")
def test_an_s3_endpoint_in_the_url_is_used_with_path_style_addressing() -> None:
    options = _options("s3://minio:9000/bucket/models", {"AWS_DEFAULT_REGION": "eu-west-1"})
    assert options["client_kwargs"] == {
        "endpoint_url": "http://minio:9000",
        "region_name": "eu-west-1",
    }
    assert options["config_kwargs"] == {"s3": {"addressing_style": "path"}}
    assert options["skip_instance_cache"] is True
    assert "key" not in options  # botocore reads AWS_ACCESS_KEY_ID and friends itself


@pytest.mark.usefixtures("backends")
def test_aws_endpoint_url_serves_urls_without_an_endpoint() -> None:
    options = _options("s3://bucket/models", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"})
    assert options["client_kwargs"] == {"endpoint_url": "http://127.0.0.1:9000"}
    plain = _options("s3://bucket/models", {})
    assert plain["client_kwargs"] == {} and "config_kwargs" not in plain


@pytest.mark.usefixtures("backends")
def test_the_credential_file_entry_with_the_longest_matching_name_wins(
    tmp_path: Path, key_file: str
) -> None:
    credentials = tmp_path / "cloud_credential.json"
    credentials.write_text(
        json.dumps(
            {
                "s3": {
                    "": {"key_id": "ANY", "secret_key": "any", "region": "us-east-1"},
                    "s3://bucket-002": {
                        "key_id": "KEY2",
                        "secret_key": "secret2",
                        "session_token": "token2",
                        "region": "eu-central-1",
                    },
                },
                "gs": {"gs://bucket": key_file},
                "as": {"as://acct/c": {"account_str": "other", "account_key": "k=="}},
            }
        )
    )
    environ = {"TRITON_CLOUD_CREDENTIAL_PATH": str(credentials)}
    s3 = _options("s3://bucket-002/models", environ)
    assert (s3["key"], s3["secret"], s3["token"]) == ("KEY2", "secret2", "token2")
    assert s3["client_kwargs"] == {"region_name": "eu-central-1"}
    assert _options("s3://elsewhere/models", environ)["key"] == "ANY"
    assert _options("gs://bucket/m", environ)["token"] == key_file
    azure = _options("as://acct/c/m", environ)
    assert (azure["account_name"], azure["account_key"]) == ("other", "k==")
    with pytest.raises(InvalidArgumentError, match="Cannot match credential for path gs://x/m"):
        _options("gs://x/m", environ)


@pytest.mark.usefixtures("backends")
def test_an_unreadable_credential_file_is_named(tmp_path: Path) -> None:
    environ = {"TRITON_CLOUD_CREDENTIAL_PATH": str(tmp_path / "missing.json")}
    with pytest.raises(InvalidArgumentError, match="TRITON_CLOUD_CREDENTIAL_PATH .*missing.json"):
        _options("s3://bucket/models", environ)


@pytest.mark.usefixtures("backends")
def test_google_application_credentials_is_the_gcs_token(key_file: str) -> None:
    environ = {"GOOGLE_APPLICATION_CREDENTIALS": key_file}
    assert _options("gs://bucket/models", environ)["token"] == key_file
    assert _options("gs://bucket/models", {})["token"] is None  # gcsfs's default chain


@pytest.mark.usefixtures("backends")
def test_a_gcs_key_file_that_does_not_exist_is_named_not_sent_as_a_token(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    message = f"GOOGLE_APPLICATION_CREDENTIALS names '{missing}', which is not a readable file"
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        _options("gs://bucket/models", {"GOOGLE_APPLICATION_CREDENTIALS": str(missing)})


@pytest.mark.usefixtures("backends")
def test_storage_emulator_host_reads_gcs_anonymously_through_the_json_api(key_file: str) -> None:
    parsed = parse_remote_url("gs://bucket/models")
    assert parsed is not None
    fs = open_filesystem(parsed, {"STORAGE_EMULATOR_HOST": "127.0.0.1:4443"})
    assert isinstance(fs, _JsonApiRecorder)
    assert fs.kwargs == {
        "token": "anon",
        "endpoint_url": "http://127.0.0.1:4443",
        "skip_instance_cache": True,
    }
    environ = {
        "STORAGE_EMULATOR_HOST": "https://gcs.local:443",
        "GOOGLE_APPLICATION_CREDENTIALS": key_file,
    }
    keyed = _options("gs://bucket/models", environ)
    assert (keyed["token"], keyed["endpoint_url"]) == (key_file, "https://gcs.local:443")


@pytest.mark.usefixtures("backends")
def test_azure_takes_the_account_and_key_from_the_environment() -> None:
    environ = {"AZURE_STORAGE_ACCOUNT": "envaccount", "AZURE_STORAGE_KEY": "a2V5"}
    options = _options("as://urlaccount/container/models", environ)
    assert (options["account_name"], options["account_key"]) == ("envaccount", "a2V5")
    anonymous = _options("as://urlaccount/container/models", {})
    assert anonymous["account_name"] == "urlaccount" and anonymous["anon"] is True
    identity = _options("as://a/c", {"AZURE_STORAGE_AUTH_TYPE": "managed_identity"})
    assert identity["anon"] is False and "account_key" not in identity


# google-api-core, which gcsfs imports, warns that its support for Python 3.11 will end
@pytest.mark.filterwarnings("ignore:You are using a Python version:FutureWarning")
def test_a_gcs_key_file_gcsfs_cannot_read_is_reported_with_the_credential_hint(
    tmp_path: Path,
) -> None:
    pytest.importorskip("gcsfs", reason="the cloud extra is not installed")
    not_json = tmp_path / "key.json"
    not_json.write_text("not a key")
    # the emulator's address is never reached: gcsfs reads the key file when it is built
    environ = {
        "GOOGLE_APPLICATION_CREDENTIALS": str(not_json),
        "STORAGE_EMULATOR_HOST": "127.0.0.1:9",
    }
    parsed = parse_remote_url("gs://bucket/models")
    assert parsed is not None
    with pytest.raises(UnavailableError) as raised:
        open_filesystem(parsed, environ)
    assert str(raised.value).startswith("Unable to read model repository 'gs://bucket/models'")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(raised.value)


@pytest.mark.usefixtures("backends")
def test_an_azure_connection_string_names_the_endpoint_for_its_own_account() -> None:
    connection = (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    )
    environ = {"AZURE_STORAGE_CONNECTION_STRING": connection, "AZURE_STORAGE_KEY": "ignored"}
    options = _options("as://devstoreaccount1/container/models", environ)
    assert options == {"connection_string": connection, "skip_instance_cache": True}
    message = "AZURE_STORAGE_CONNECTION_STRING is for account 'devstoreaccount1', not 'other'"
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        _options("as://other/container/models", environ)


@pytest.mark.usefixtures("backends")
def test_an_azure_connection_string_and_a_credential_file_together_are_refused(
    tmp_path: Path,
) -> None:
    credentials = tmp_path / "cloud_credential.json"
    credentials.write_text(json.dumps({"as": {"": {"account_str": "a", "account_key": "k=="}}}))
    environ = {
        "TRITON_CLOUD_CREDENTIAL_PATH": str(credentials),
        "AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=a2V5",
    }
    with pytest.raises(InvalidArgumentError, match="unset one of them"):
        _options("as://a/container/models", environ)


def test_importing_workbench_imports_no_cloud_back_end() -> None:
    code = (
        "import sys, workbench, workbench.server, workbench.repository; "
        "cloud = ('fsspec', 's3fs', 'gcsfs', 'adlfs', 'botocore'); "
        "loaded = [m for m in cloud if m in sys.modules]; assert loaded == [], loaded"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
