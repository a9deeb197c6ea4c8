"""The one table from error categories to HTTP status and gRPC status code.

Mirrors Triton Inference Server 2.51.0 (tag ``v2.51.0`` of triton-inference-server/server):
``HttpCodeFromError`` in ``src/http_server.cc`` and ``GrpcStatusUtil::CodeToStatus`` in
``src/grpc/grpc_utils.cc``. Triton has no HTTP status of its own for ``UNKNOWN``,
``INVALID_ARG``, ``ALREADY_EXISTS`` and ``CANCELLED``: all four answer 400.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.errors import WorkbenchError

if TYPE_CHECKING:  # grpc is imported only where a gRPC code is asked for
    import grpc

#: ``WorkbenchError.code`` -> (HTTP status, gRPC status code name)
STATUS_TABLE: dict[str, tuple[int, str]] = {
    "INVALID_ARG": (400, "INVALID_ARGUMENT"),
    "NOT_FOUND": (404, "NOT_FOUND"),
    "UNAVAILABLE": (503, "UNAVAILABLE"),
    "UNSUPPORTED": (501, "UNIMPLEMENTED"),
    "ALREADY_EXISTS": (400, "ALREADY_EXISTS"),
    "INTERNAL": (500, "INTERNAL"),
    "CANCELLED": (400, "CANCELLED"),
    "UNKNOWN": (400, "UNKNOWN"),
}

#: What an exception that is not a ``WorkbenchError`` counts as: a bug on our side.
_UNEXPECTED = "INTERNAL"


def error_code(error: BaseException) -> str:
    """Triton's error code name for ``error`` (``INTERNAL`` for unexpected exceptions)."""
    if isinstance(error, WorkbenchError):
        return error.code if error.code in STATUS_TABLE else "UNKNOWN"
    return _UNEXPECTED


def http_status(error: BaseException) -> int:
    """The HTTP status Triton answers for an error of this category."""
    return STATUS_TABLE[error_code(error)][0]


def grpc_status(error: BaseException) -> grpc.StatusCode:
    """The gRPC status code Triton answers for an error of this category."""
    import grpc

    return grpc.StatusCode[STATUS_TABLE[error_code(error)][1]]


def error_message(error: BaseException) -> str:
    """The text for the ``error`` field: the message, or the exception's type when empty."""
    return str(error) or type(error).__name__


__all__ = ["STATUS_TABLE", "error_code", "error_message", "grpc_status", "http_status"]
