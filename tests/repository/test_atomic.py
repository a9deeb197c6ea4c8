from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from workbench.repository import atomic_write


def test_writes_bytes_and_returns_path(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"

    result = atomic_write(target, b"\x00\x01binary")

    assert result == target
    assert target.read_bytes() == b"\x00\x01binary"


def test_writes_str_as_utf8(tmp_path: Path) -> None:
    target = tmp_path / "config.pbtxt"

    atomic_write(str(target), 'name: "añadir"\n')

    assert target.read_bytes() == 'name: "añadir"\n'.encode()


def test_replaces_existing_content_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "config.pbtxt"
    target.write_text("old content that is longer than the new one")
    os.chmod(target, 0o640)

    atomic_write(target, "new")

    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_new_file_gets_umask_mode(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "fresh.txt", "x")
    finally:
        os.umask(umask)

    assert stat.S_IMODE((tmp_path / "fresh.txt").stat().st_mode) == 0o644


def test_leaves_no_temporary_files(tmp_path: Path) -> None:
    for i in range(3):
        atomic_write(tmp_path / "config.pbtxt", f"v{i}")

    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.pbtxt"]


def test_failure_keeps_old_content_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "config.pbtxt"
    target.write_text("old")

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, "new")

    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.pbtxt"]


def test_missing_folder_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "absent" / "config.pbtxt", "x")
