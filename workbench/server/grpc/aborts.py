"""Every failure of an RPC becomes Triton's gRPC status and message; the server stays up.

The status codes come from the one table in ``workbench/server/status.py``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc

from workbench.errors import WorkbenchError
from workbench.server.status import error_message, grpc_status

log = logging.getLogger("workbench.server.grpc")

Service = TypeVar("Service")
Handler = Callable[[Service, Any, Any], Awaitable[Any]]


def aborts_on_error(handler: Handler[Service]) -> Handler[Service]:
    """Wrap a unary handler: an exception aborts the call with its category's status."""

    @functools.wraps(handler)
    async def serve(self: Service, request: Any, context: Any) -> Any:
        try:
            return await handler(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            await abort(context, exc)

    return serve


async def abort(context: Any, error: BaseException) -> None:
    """End the call with ``error``'s status and message (raises ``grpc.aio.AbortError``)."""
    if not isinstance(error, WorkbenchError):
        log.exception("unexpected error while serving a gRPC call", exc_info=error)
    await context.abort(grpc_status(error), error_message(error))


__all__ = ["abort", "aborts_on_error"]
