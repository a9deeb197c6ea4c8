"""A GCS emulator on loopback for the remote repository tests: gcp-storage-emulator.

It answers GCS's JSON API on ``127.0.0.1`` and an ephemeral port, in a thread of the test
process. The workbench reaches it as users reach an emulator: ``STORAGE_EMULATOR_HOST`` names
it and ``gs://bucket/path`` stays Triton's form. The tests fill it over the same JSON API with
the standard library, not through gcsfs, the library under test.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.repository.object_store import ObjectStore, store_unavailable

#: variables a developer's shell may carry that would change what gcsfs and google-auth do
_CLEARED = (
    "GOOGLE_APPLICATION_CREDENTIALS",
    "TRITON_CLOUD_CREDENTIAL_PATH",
    "TRITON_GCS_MOUNT_DIRECTORY",
)
#: no proxy, even where the environment names one: the emulator is on loopback
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class GcsServer(ObjectStore):
    """gcp-storage-emulator serving from memory on loopback."""

    scheme = "gs"

    def __init__(self) -> None:
        try:
            from gcp_storage_emulator.server import create_server
        except ImportError:
            store_unavailable("gcp-storage-emulator is not installed (the test extra has it)")
        self._server = create_server("127.0.0.1", 0, in_memory=True)
        self.endpoint = ""

    def start(self) -> GcsServer:
        self._server.start()
        # the emulator has no accessor for the port it bound (pinned in pyproject.toml)
        host, port = self._server._api._httpd.server_address[:2]
        self.endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self._server.stop()

    def url(self, bucket: str, prefix: str = "models") -> str:
        return f"gs://{bucket}/{prefix}".rstrip("/")

    def create_bucket(self, name: str) -> None:
        body = json.dumps({"name": name}).encode()
        self._call("POST", "/storage/v1/b?project=workbench-test", body, "application/json")

    def put(self, bucket: str, key: str, body: bytes) -> None:
        name = quote(key, safe="")
        path = f"/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}"
        self._call("POST", path, body, "application/octet-stream")

    def delete_prefix(self, bucket: str, prefix: str) -> None:
        listed = self._call("GET", f"/storage/v1/b/{bucket}/o?prefix={quote(prefix, safe='')}")
        for item in listed.get("items", []):
            self._call("DELETE", f"/storage/v1/b/{bucket}/o/{quote(item['name'], safe='')}")

    def isolate(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        for name in _CLEARED:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", self.endpoint)
        # were anything to ask google-auth for default credentials, no metadata server
        monkeypatch.setenv("NO_GCE_CHECK", "true")
        monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud-config"))

    def refuse_credentials(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
        missing = tmp_path / "missing-key.json"
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(missing))
        return f"GOOGLE_APPLICATION_CREDENTIALS names '{missing}', which is not a readable file"

    def _call(self, method: str, path: str, body: bytes | None = None, kind: str = "") -> Any:
        request = urllib.request.Request(f"{self.endpoint}{path}", data=body, method=method)
        if kind:
            request.add_header("Content-Type", kind)
        with _OPENER.open(request, timeout=30) as response:
            answer = response.read()
        return json.loads(answer) if answer else {}


def running_gcs_server() -> Iterator[GcsServer]:
    """Body of the module-scoped ``gcs`` fixtures: one emulator for a test module."""
    pytest.importorskip("gcsfs", reason="the cloud extra is not installed")
    server = GcsServer().start()
    try:
        yield server
    finally:
        server.stop()
