"""One exception hierarchy for the whole library.

Each category mirrors a ``TRITONSERVER_Error_Code`` so that the server layer can map it to
Triton's HTTP status and gRPC code from a single table (``workbench/server/status.py``).
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base of every error the library raises on purpose."""

    #: Triton's error code name (``TRITONSERVER_ERROR_<code>``).
    code: str = "UNKNOWN"
    #: the HTTP status of the server's reply, when the error is a server's answer
    status: int | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(WorkbenchError):
    """The caller sent something malformed: wrong shape, dtype, JSON, parameter."""

    code = "INVALID_ARG"


class ConfigError(InvalidArgumentError):
    """A model configuration is invalid (syntax or semantics)."""


class NotFoundError(WorkbenchError):
    """An unknown model, version, tensor or file."""

    code = "NOT_FOUND"


class UnavailableError(WorkbenchError):
    """The target exists but cannot serve now (not loaded, loading, failed, shutting down)."""

    code = "UNAVAILABLE"


class UnsupportedError(WorkbenchError):
    """A feature that is valid for Triton but not implemented (or not available here)."""

    code = "UNSUPPORTED"


class AlreadyExistsError(WorkbenchError):
    """Something that must be unique already exists."""

    code = "ALREADY_EXISTS"


class InternalError(WorkbenchError):
    """A failure inside the server or a model, not the caller's fault."""

    code = "INTERNAL"


class CancelledError(WorkbenchError):
    """The request was cancelled before it completed."""

    code = "CANCELLED"


class MissingDependencyError(UnsupportedError):
    """An optional dependency is not installed; the message names the pip extra."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"{module} is not installed; install it with: pip install 'triton-workbench[{extra}]'"
        )
        self.module = module
        self.extra = extra


__all__ = [
    "AlreadyExistsError",
    "CancelledError",
    "ConfigError",
    "InternalError",
    "InvalidArgumentError",
    "MissingDependencyError",
    "NotFoundError",
    "UnavailableError",
    "UnsupportedError",
    "WorkbenchError",
]
