"""Triton Workbench: build, tune and ship Triton-style model serving from a notebook.

``import workbench`` stays light: the server stack is imported on first use, and optional
backends (onnxruntime, torch, tensorrt) only when a model needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workbench._version import __version__
from workbench.errors import (
    AlreadyExistsError,
    ConfigError,
    InternalError,
    InvalidArgumentError,
    MissingDependencyError,
    NotFoundError,
    UnavailableError,
    UnsupportedError,
    WorkbenchError,
)

if TYPE_CHECKING:
    from workbench.bench import SweepResult
    from workbench.notebook import ConfigEditor, TraceReport, Workbench
    from workbench.server.hosting import Server
    from workbench.server.options import ServerOptions

_LAZY = {
    "ConfigEditor": "workbench.notebook",
    "Server": "workbench.server.hosting",
    "ServerOptions": "workbench.server.options",
    "SweepResult": "workbench.bench",
    "TraceReport": "workbench.notebook",
    "Workbench": "workbench.notebook",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute '{name}'")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext workbench``: the ``%workbench`` and ``%%pbtxt`` magics."""
    from workbench.notebook.magics import load_ipython_extension as load

    load(ipython)


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """The Jupyter server extension (``workbench.jupyter``), enabled by the
    ``jupyter_server_config.d/workbench.json`` file that installing the distribution adds."""
    from workbench.jupyter import _jupyter_server_extension_points as points

    return points()


__all__ = [
    "AlreadyExistsError",
    "ConfigEditor",
    "ConfigError",
    "InternalError",
    "InvalidArgumentError",
    "MissingDependencyError",
    "NotFoundError",
    "Server",
    "ServerOptions",
    "SweepResult",
    "TraceReport",
    "UnavailableError",
    "UnsupportedError",
    "Workbench",
    "WorkbenchError",
    "__version__",
]
