"""The error table: Triton 2.51's HTTP status and gRPC code per category."""

from __future__ import annotations

import grpc
import pytest

from workbench import errors
from workbench.server.status import STATUS_TABLE, error_message, grpc_status, http_status

EXPECTED = [
    (errors.InvalidArgumentError("x"), 400, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.ConfigError("x"), 400, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFoundError("x"), 404, grpc.StatusCode.NOT_FOUND),
    (errors.UnavailableError("x"), 503, grpc.StatusCode.UNAVAILABLE),
    (errors.UnsupportedError("x"), 501, grpc.StatusCode.UNIMPLEMENTED),
    (errors.MissingDependencyError("torch", "torch"), 501, grpc.StatusCode.UNIMPLEMENTED),
    (errors.AlreadyExistsError("x"), 400, grpc.StatusCode.ALREADY_EXISTS),
    (errors.InternalError("x"), 500, grpc.StatusCode.INTERNAL),
    (errors.CancelledError("x"), 400, grpc.StatusCode.CANCELLED),
    (errors.WorkbenchError("x"), 400, grpc.StatusCode.UNKNOWN),
    (ValueError("bug"), 500, grpc.StatusCode.INTERNAL),
]


@pytest.mark.parametrize(("error", "status", "code"), EXPECTED)
def test_status_of_each_category(error: Exception, status: int, code: grpc.StatusCode) -> None:
    assert http_status(error) == status
    assert grpc_status(error) == code


def test_every_error_code_is_in_the_table() -> None:
    codes = {cls.code for cls in vars(errors).values() if isinstance(cls, type)
             and issubclass(cls, errors.WorkbenchError)}  # fmt: skip
    assert codes <= set(STATUS_TABLE)


def test_error_message_never_empty() -> None:
    assert error_message(KeyError()) == "KeyError"
    assert error_message(errors.NotFoundError("gone")) == "gone"
