"""Real tritonserver for the side-by-side python-backend tests, and the instances a test makes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.conftest import peers

__all__ = ["peers"]


@pytest.fixture
def instances() -> Iterator[list[Any]]:
    """Instances made by a test, closed at its end whatever happened."""
    made: list[Any] = []
    yield made
    for instance in made:
        instance.close()
