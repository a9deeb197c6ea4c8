"""Triton's Python backend: unchanged ``model.py`` files through a ``pb_utils`` shim."""

from __future__ import annotations

from workbench.backends.python._process_instance import ProcessModelInstance
from workbench.backends.python.backend import PythonBackend, PythonModelInstance

__all__ = ["ProcessModelInstance", "PythonBackend", "PythonModelInstance"]
