"""Fixtures for backend tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return tmp_path / "models"
