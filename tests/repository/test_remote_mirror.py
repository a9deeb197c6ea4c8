"""A remote repository read through its local copy, against an S3-compatible server on loopback.

moto's server mode answers s3fs as S3 would (ETags, listings, errors); each test gets its own
bucket. Serving such a repository end to end is in ``tests/integration/test_remote_repository.py``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.repository.conftest import MakeModel
from tests.repository.s3_server import ADD_ONE, S3Server
from workbench.errors import NotFoundError, UnavailableError
from workbench.repository import ModelRepository, diff_snapshots, remote_mirror
from workbench.repository.remote_mirror import RemoteMirror
from workbench.repository.remote_url import parse_remote_url

pytestmark = pytest.mark.usefixtures("aws_environment")

OpenRepository = Callable[..., ModelRepository]


@pytest.fixture
def open_repository() -> Iterator[OpenRepository]:
    """``ModelRepository(...)``, closed (its copies deleted) when the test ends."""
    opened: list[ModelRepository] = []

    def open_(*paths: str) -> ModelRepository:
        opened.append(ModelRepository(list(paths)))
        return opened[-1]

    yield open_
    for repository in opened:
        repository.close()


def test_the_repository_is_copied_to_a_temporary_folder_that_close_deletes(
    s3: S3Server, bucket: str, open_repository: OpenRepository
) -> None:
    repository = open_repository(s3.url(bucket))
    (root,) = repository.roots
    assert repository.model_names() == ["add_one"]
    assert repository.remote_urls == (s3.url(bucket),)
    for name in ("config.pbtxt", "1/model.py"):
        assert (root / "add_one" / name).read_bytes() == (ADD_ONE / name).read_bytes()
    assert repository.read_config("add_one").max_batch_size == 8
    assert repr(repository) == f"ModelRepository({[s3.url(bucket)]!r})"
    repository.close()
    assert not root.exists()


def test_a_snapshot_sees_models_modified_added_and_removed_in_the_bucket(
    s3: S3Server, bucket: str, open_repository: OpenRepository
) -> None:
    repository = open_repository(s3.url(bucket))
    before = repository.snapshot()
    assert not diff_snapshots(before, repository.snapshot())  # nothing downloaded again

    model_py = (ADD_ONE / "1" / "model.py").read_bytes()
    changed = model_py.replace(b"+ 1", b"+ 2")
    assert len(changed) == len(model_py)  # same size: the ETag tells the change
    s3.put(bucket, "models/add_one/1/model.py", changed)
    s3.upload(ADD_ONE, bucket, "models/add_two")
    modified = repository.snapshot()
    changes = diff_snapshots(before, modified)
    assert (changes.added, changes.modified, changes.removed) == (["add_two"], ["add_one"], [])
    assert (repository.roots[0] / "add_one" / "1" / "model.py").read_bytes() == changed

    s3.delete_prefix(bucket, "models/add_two/")
    changes = diff_snapshots(modified, repository.snapshot())
    assert (changes.added, changes.modified, changes.removed) == ([], [], ["add_two"])
    assert not (repository.roots[0] / "add_two").exists()


def test_a_removed_model_leaves_no_folder_even_with_bytecode_written_into_it(
    s3: S3Server, bucket: str, open_repository: OpenRepository
) -> None:
    repository = open_repository(s3.url(bucket))
    cache = repository.roots[0] / "add_one" / "1" / "__pycache__"
    cache.mkdir()
    (cache / "model.cpython-311.pyc").write_bytes(b"\0")
    repository.snapshot()
    assert cache.is_dir()  # the server's own files stay while the model is there
    s3.delete_prefix(bucket, "models/add_one/")
    assert repository.snapshot() == {} and repository.model_names() == []


def test_the_last_model_removed_leaves_an_empty_repository(
    s3: S3Server, bucket: str, open_repository: OpenRepository
) -> None:
    repository = open_repository(s3.url(bucket))
    s3.delete_prefix(bucket, "models/")
    assert repository.snapshot() == {}


def test_refresh_copies_one_model_afresh(
    s3: S3Server, bucket: str, open_repository: OpenRepository
) -> None:
    repository = open_repository(s3.url(bucket))
    config = repository.roots[0] / "add_one" / "config.pbtxt"
    config.write_text("tampered")
    repository.refresh("add_one")
    assert config.read_bytes() == (ADD_ONE / "config.pbtxt").read_bytes()
    s3.delete_prefix(bucket, "models/add_one/")
    repository.refresh("add_one")
    assert "add_one" not in repository.model_names()


def test_folder_marker_objects_become_folders(
    s3: S3Server, bucket: str, open_repository: OpenRepository
) -> None:
    s3.put(bucket, "models/empty_model/", b"")
    repository = open_repository(s3.url(bucket))
    assert repository.model_names() == ["add_one", "empty_model"]
    s3.delete_prefix(bucket, "models/empty_model/")
    repository.snapshot()
    assert repository.model_names() == ["add_one"]


def test_remote_and_local_roots_mix_as_several_repositories(
    s3: S3Server,
    bucket: str,
    open_repository: OpenRepository,
    repo_root: Path,
    make_model: MakeModel,
) -> None:
    make_model(repo_root, "local_model")
    repository = open_repository(s3.url(bucket), str(repo_root), s3.url(bucket))
    assert len(repository.roots) == 2  # the same URL twice is one root, as in Triton
    assert repository.model_names() == ["add_one", "local_model"]


def test_the_copy_goes_under_triton_aws_mount_directory(
    s3: S3Server,
    bucket: str,
    open_repository: OpenRepository,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    mount = tmp_path / "mount"
    mount.mkdir()
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(mount))
    repository = open_repository(s3.url(bucket))
    assert repository.roots[0].parent == mount


def test_a_missing_bucket_is_named(s3: S3Server) -> None:
    with pytest.raises(NotFoundError, match="bucket 'no-such-bucket' not found"):
        ModelRepository(s3.url("no-such-bucket"))


def test_a_path_without_objects_does_not_exist(s3: S3Server, bucket: str) -> None:
    url = s3.url(bucket, "not/there")
    with pytest.raises(NotFoundError, match=f"'{url}' does not exist or is not a directory"):
        ModelRepository(url)


def test_missing_credentials_say_where_credentials_come_from(
    s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(UnavailableError) as raised:
        ModelRepository(s3.url(bucket))
    message = str(raised.value)
    assert message.startswith(f"Unable to read model repository '{s3.url(bucket)}'")
    assert "NoCredentialsError" in message and "AWS_ACCESS_KEY_ID" in message


def test_a_failed_open_leaves_no_copy_behind(
    s3: S3Server, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount = tmp_path / "mount"
    mount.mkdir()
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(mount))
    with pytest.raises(NotFoundError):
        ModelRepository([s3.url(bucket), s3.url("no-such-bucket")])
    assert list(mount.iterdir()) == []  # the first root's copy was deleted too


def test_a_poll_that_cannot_read_the_store_keeps_the_last_copy(
    s3: S3Server,
    bucket: str,
    open_repository: OpenRepository,
    caplog: pytest.LogCaptureFixture,
) -> None:
    repository = open_repository(s3.url(bucket))
    before = repository.snapshot()
    s3.delete_prefix(bucket, "models/")
    s3.client().delete_bucket(Bucket=bucket)
    with caplog.at_level(logging.WARNING, logger="workbench.repository"):
        assert repository.snapshot() == before
    assert "failed to poll model repository" in caplog.text and bucket in caplog.text


@pytest.mark.parametrize("gives_up", [False, True])
def test_close_waits_for_a_poll_under_way_and_leaves_no_copy(
    gives_up: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A poll syncs on a worker thread, which stopping the server does not stop: close must
    # not delete the copy under it (the sync would write the files again after the delete).
    # A store that stops answering is not waited for: the sync deletes what it wrote itself.
    from fsspec.implementations.memory import MemoryFileSystem

    if gives_up:
        monkeypatch.setattr(remote_mirror, "CLOSE_WAIT_S", 0.05)

    class GatedListing(MemoryFileSystem):
        """The store's listing waits for the test's gate once ``gated`` is set."""

        gated = threading.Event()
        listing = threading.Event()
        gate = threading.Event()

        def find(self, path: str, **kwargs: Any) -> Any:
            if self.gated.is_set():
                self.listing.set()
                assert self.gate.wait(30), "the test never opened the gate"
            return super().find(path, **kwargs)

    GatedListing.gated.clear()
    GatedListing.listing.clear()
    GatedListing.gate.clear()
    fs = GatedListing(skip_instance_cache=True)
    fs.store.clear()
    fs.pipe({"/bucket/add_one/config.pbtxt": b"name: 'add_one'"})
    url = parse_remote_url("s3://bucket")
    assert url is not None
    mirror = RemoteMirror.open(url, fs)
    root = mirror.local_root
    assert (root / "add_one" / "config.pbtxt").is_file()
    fs.pipe({"/bucket/add_one/1/model.py": b"# a new version"})
    GatedListing.gated.set()
    poll = threading.Thread(target=mirror.sync)
    poll.start()
    assert GatedListing.listing.wait(30)
    closing = threading.Thread(target=mirror.close)
    closing.start()
    if gives_up:
        closing.join(30)
        assert not closing.is_alive()
    else:
        closing.join(0.2)
        assert closing.is_alive()  # waiting for the sync under way
    GatedListing.gate.set()
    poll.join(30)
    closing.join(30)
    assert not root.exists()
    mirror.sync()  # a sync after close does nothing
    assert not root.exists()
