"""Real tritonserver for the side-by-side python-backend tests."""

from tests.integration.conftest import peers

__all__ = ["peers"]
