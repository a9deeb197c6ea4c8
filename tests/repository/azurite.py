"""Azurite, the Azure Storage emulator, on loopback for the remote repository tests.

Azurite comes from the npm registry (Node.js and npm are on the machine, as the JupyterLab
extension's build needs them): installed once into ``<peers>/azurite-<version>/`` (the
``.peers/`` cache of ``tests/integration/peers.py``, ``WORKBENCH_PEERS_DIR`` overrides) and
run as ``azurite-blob`` on ``127.0.0.1`` and a port it picks, with telemetry off. The workbench
reaches it as users reach an emulator: ``AZURE_STORAGE_CONNECTION_STRING`` names its endpoint
and Azurite's well-known development account and key, and ``as://account/container/path``
stays Triton's form. The tests fill it through azure-storage-blob (adlfs's own dependency).

Without npm or the registry the tests skip, or fail where ``WORKBENCH_REQUIRE_PEERS=1`` (CI).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.peers import peers_dir
from tests.repository.object_store import ObjectStore, store_unavailable

#: the last release whose package.json accepts Node 20 (3.36 asks for Node >= 21, 3.37 >= 22)
AZURITE_VERSION = "3.35.0"
#: Azurite's development account and its published key (the same in every Azurite)
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
#: a well-formed key that is not the account's
WRONG_KEY = "bm90LXRoZS1hY2NvdW50LWtleQ=="
_STARTED = re.compile(r"Azurite Blob service successfully listens on (http://\S+)")
_START_TIMEOUT_S = 60.0
#: variables a developer's shell may carry that would change what adlfs does
_CLEARED = (
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_AUTH_TYPE",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_CLIENT_ID",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_STORAGE_TENANT_ID",
    "AZURE_STORAGE_ANON",
    "TRITON_CLOUD_CREDENTIAL_PATH",
    "TRITON_AZURE_MOUNT_DIRECTORY",
)


def install_azurite(cache: Path) -> Path:
    """``azurite-blob`` from the npm registry, installed once under ``cache``.

    Installs into a temporary folder renamed into place, so an interrupted or concurrent
    install never leaves a half-installed copy that a later run would take as done.
    """
    folder = cache / f"azurite-{AZURITE_VERSION}"
    binary = folder / "node_modules" / ".bin" / "azurite-blob"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        store_unavailable("Azurite needs Node.js and npm on PATH")
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".azurite-", dir=cache))
    command = [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund"]
    command += ["--ignore-scripts", f"azurite@{AZURITE_VERSION}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        output = (result.stdout + result.stderr).strip()[-2000:]
        store_unavailable(f"`npm install azurite@{AZURITE_VERSION}` failed: {output}")
    try:
        staging.rename(folder)
    except OSError:  # another run installed it meanwhile
        shutil.rmtree(staging, ignore_errors=True)
    return binary


class Azurite(ObjectStore):
    """``azurite-blob`` in a child process, storing under ``workdir``."""

    scheme = "as"

    def __init__(self, binary: Path, workdir: Path) -> None:
        self._binary = binary
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None
        self._client: Any = None
        self.endpoint = ""

    def start(self) -> Azurite:
        log = self._workdir / "azurite.log"
        command = [str(self._binary), "--blobHost", "127.0.0.1", "--blobPort", "0"]
        command += ["--location", str(self._workdir / "data"), "--silent", "--disableTelemetry"]
        # the azure-storage-blob installed may speak a newer API version than this Azurite
        command += ["--skipApiVersionCheck", "--loose"]
        with open(log, "wb") as output:
            self._process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        self.endpoint = self._wait_started(log)
        return self

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def connection_string(self, key: str = ACCOUNT_KEY) -> str:
        """What ``AZURE_STORAGE_CONNECTION_STRING`` holds to reach this Azurite."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};"
            f"BlobEndpoint={self.endpoint}/{ACCOUNT};"
        )

    def url(self, bucket: str, prefix: str = "models") -> str:
        return f"as://{ACCOUNT}/{bucket}/{prefix}".rstrip("/")

    def client(self) -> Any:
        if self._client is None:
            from azure.storage.blob import BlobServiceClient

            self._client = BlobServiceClient.from_connection_string(self.connection_string())
        return self._client

    def create_bucket(self, name: str) -> None:
        self.client().create_container(name)

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.client().get_blob_client(bucket, key).upload_blob(body, overwrite=True)

    def delete_prefix(self, bucket: str, prefix: str) -> None:
        container = self.client().get_container_client(bucket)
        for blob in list(container.list_blobs(name_starts_with=prefix)):
            container.delete_blob(blob.name)

    def isolate(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        for name in _CLEARED:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", self.connection_string())

    def refuse_credentials(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
        monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", self.connection_string(WRONG_KEY))
        return "Server failed to authenticate the request"

    def _wait_started(self, log: Path) -> str:
        deadline = time.monotonic() + _START_TIMEOUT_S
        assert self._process is not None
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if found := _STARTED.search(text):
                return found.group(1)
            if self._process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        store_unavailable(f"azurite-blob did not start: {log.read_text(errors='replace')[-2000:]}")


def running_azurite(workdir: Path) -> Iterator[Azurite]:
    """Body of the module-scoped ``azurite`` fixtures: one Azurite for a test module."""
    pytest.importorskip("adlfs", reason="the cloud extra is not installed")
    server = Azurite(install_azurite(peers_dir()), workdir).start()
    try:
        yield server
    finally:
        server.stop()
