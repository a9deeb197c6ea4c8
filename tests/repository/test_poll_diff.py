from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from workbench.repository import ModelRepository, RepositoryChanges, diff_snapshots, fingerprint

MakeModel = Callable[..., Path]


def bump_mtime(path: Path) -> None:
    """Move a file's mtime forward explicitly: coarse clocks could hide a quick edit."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_diff_sorts_each_category() -> None:
    old = {"a": "1", "b": "1", "c": "1", "d": "1"}
    new = {"d": "2", "c": "1", "z": "1", "e": "1", "b": "9"}

    changes = diff_snapshots(old, new)

    assert changes == RepositoryChanges(added=["e", "z"], removed=["a"], modified=["b", "d"])
    assert bool(changes) is True


def test_diff_of_equal_snapshots_is_empty() -> None:
    changes = diff_snapshots({"a": "1"}, {"a": "1"})

    assert changes == RepositoryChanges()
    assert (changes.added, changes.removed, changes.modified) == ([], [], [])
    assert bool(changes) is False


def test_fingerprint_is_stable_without_changes(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "m")

    assert fingerprint(model_dir) == fingerprint(model_dir)
    assert len(fingerprint(model_dir)) == 32


def test_fingerprint_changes_on_edit(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "m")
    before = fingerprint(model_dir)

    (model_dir / "1" / "model.py").write_text("class TritonPythonModel: pass  # edited\n")

    assert fingerprint(model_dir) != before


def test_fingerprint_changes_on_same_size_edit(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "m")
    config = model_dir / "config.pbtxt"
    before = fingerprint(model_dir)

    config.write_text(config.read_text().replace("8", "9"))
    bump_mtime(config)

    assert fingerprint(model_dir) != before


def test_fingerprint_changes_on_add_and_remove(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "m")
    original = fingerprint(model_dir)

    (model_dir / "2").mkdir()
    with_empty_version = fingerprint(model_dir)
    (model_dir / "2" / "model.py").write_text("")
    with_file = fingerprint(model_dir)
    (model_dir / "2" / "model.py").unlink()
    (model_dir / "2").rmdir()

    assert len({original, with_empty_version, with_file}) == 3
    assert fingerprint(model_dir) == original


def test_fingerprint_ignores_hidden_and_bytecode(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "m")
    before = fingerprint(model_dir)

    (model_dir / ".config.pbtxt.swp").write_text("editor state")
    (model_dir / ".ipynb_checkpoints").mkdir()
    (model_dir / "1" / "__pycache__").mkdir()
    (model_dir / "1" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")

    assert fingerprint(model_dir) == before


def test_fingerprint_ignores_reading(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "m")
    before = fingerprint(model_dir)

    ModelRepository(repo_root).read_config("m")

    assert fingerprint(model_dir) == before


def test_snapshot_then_diff_end_to_end(
    tmp_path: Path, repo_root: Path, make_model: MakeModel
) -> None:
    make_model(repo_root, "keep")
    edited = make_model(repo_root, "edit")
    make_model(repo_root, "gone")
    other_root = tmp_path / "other"
    make_model(other_root, "dup")
    make_model(repo_root, "dup")
    repo = ModelRepository([repo_root, other_root])
    old = repo.snapshot()

    (edited / "1" / "model.py").write_text("changed = True\n")
    shutil.rmtree(repo_root / "gone")
    make_model(repo_root, "new")
    new = repo.snapshot()

    assert sorted(old) == ["edit", "gone", "keep"]  # 'dup' is in two roots: never loadable
    assert repo.fingerprint("keep") == old["keep"]
    assert diff_snapshots(old, new) == RepositoryChanges(
        added=["new"], removed=["gone"], modified=["edit"]
    )


def test_model_becoming_duplicate_is_removed(
    tmp_path: Path, repo_root: Path, make_model: MakeModel
) -> None:
    make_model(repo_root, "m")
    other_root = tmp_path / "other"
    other_root.mkdir()
    repo = ModelRepository([repo_root, other_root])
    old = repo.snapshot()

    make_model(other_root, "m")

    assert diff_snapshots(old, repo.snapshot()) == RepositoryChanges(removed=["m"])
