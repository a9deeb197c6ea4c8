"""The distribution's version (pyproject.toml says the same; ``tests/test_packaging.py`` checks)."""

__version__ = "0.1.0"
