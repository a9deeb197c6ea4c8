"""What the remote-repository tests need from a store on loopback, whichever it emulates.

Each of ``s3_server.py`` (moto), ``gcs_server.py`` (gcp-storage-emulator) and ``azurite.py``
(Azurite) implements :class:`ObjectStore`, so one test runs against all three: the store
gives the repository URL in Triton's form, fills buckets, points the environment at itself
and nothing else, and knows what a wrong credential looks like for it.
"""

from __future__ import annotations

import os
import uuid
from abc import ABC, abstractmethod
from pathlib import Path
from typing import NoReturn

import pytest

#: the conformance repository's add-one model, which the remote-repository tests upload
ADD_ONE = Path(__file__).resolve().parents[1] / "assets" / "conformance_repo" / "add_one"
#: set by CI: a store that cannot be installed or started fails the test instead of skipping it
REQUIRE_PEERS_ENV = "WORKBENCH_REQUIRE_PEERS"


def store_unavailable(reason: str) -> NoReturn:
    """Skip a test whose store cannot run here, or fail it where CI requires the peers."""
    if os.environ.get(REQUIRE_PEERS_ENV, "") not in ("", "0"):
        pytest.fail(f"{reason} ({REQUIRE_PEERS_ENV} is set)", pytrace=False)
    pytest.skip(reason)


class ObjectStore(ABC):
    """An object store on loopback that a remote repository URL can name."""

    #: the URL scheme Triton reads it through: ``s3``, ``gs`` or ``as``
    scheme: str

    @abstractmethod
    def url(self, bucket: str, prefix: str = "models") -> str:
        """The repository URL in Triton's form for ``prefix`` in ``bucket`` (a container)."""

    @abstractmethod
    def create_bucket(self, name: str) -> None:
        """An empty bucket (a container on Azure) called ``name``."""

    @abstractmethod
    def put(self, bucket: str, key: str, body: bytes) -> None:
        """One object, replacing any of that name."""

    @abstractmethod
    def delete_prefix(self, bucket: str, prefix: str) -> None:
        """Every object whose key starts with ``prefix``."""

    @abstractmethod
    def isolate(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """Point the environment at this store with valid credentials, and at nothing else
        (no settings of the machine leak in, no cloud metadata server is asked)."""

    @abstractmethod
    def refuse_credentials(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
        """Make the environment's credentials wrong; returns words the start error must say."""

    def new_bucket(self) -> str:
        """A fresh, empty bucket (one per test keeps tests independent)."""
        name = f"repo-{uuid.uuid4().hex[:12]}"
        self.create_bucket(name)
        return name

    def upload(self, folder: Path, bucket: str, prefix: str) -> None:
        """Every file under ``folder`` to ``bucket`` under ``prefix/`` (relative keys)."""
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                key = f"{prefix}/{path.relative_to(folder).as_posix()}"
                self.put(bucket, key, path.read_bytes())
