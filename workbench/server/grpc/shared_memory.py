"""The shared-memory parameters of a request's input or output tensor.

Checked as Triton 2.51's ``ParseSharedMemoryParams`` (``src/grpc/grpc_utils.h``) checks them.
No region can be registered with this server (see the shared-memory RPCs), so a well-formed
reference to one is answered as Triton answers an unknown region: ``NOT_FOUND``.
"""

from __future__ import annotations

from typing import Any

from workbench.errors import InvalidArgumentError, NotFoundError

REGION = "shared_memory_region"
_SIZES = ("shared_memory_offset", "shared_memory_byte_size")


def shared_memory_region(tensor: Any) -> str | None:
    """The region a tensor names (``None`` when it names none); bad parameters raise."""
    params = tensor.parameters
    region: str | None = None
    if REGION in params:
        if params[REGION].WhichOneof("parameter_choice") != "string_param":
            raise InvalidArgumentError(
                f"invalid value type for '{REGION}' parameter for tensor '{tensor.name}', "
                "expected string_param."
            )
        region = params[REGION].string_param
    for key in _SIZES:
        if key not in params:
            continue
        if region is None:
            raise InvalidArgumentError(
                f"'{key}' can not be specified without '{REGION}' parameter for tensor "
                f"'{tensor.name}'"
            )
        if params[key].WhichOneof("parameter_choice") != "int64_param":
            raise InvalidArgumentError(
                f"invalid value type for '{key}' parameter for tensor '{tensor.name}', "
                "expected int64_param."
            )
    if region is not None and _SIZES[1] not in params:
        raise InvalidArgumentError(
            f"'{_SIZES[1]}' must be specified along with '{REGION}' parameter for tensor "
            f"'{tensor.name}'"
        )
    return region


def region_not_found(region: str) -> NotFoundError:
    return NotFoundError(f"Unable to find shared memory region: '{region}'")


__all__ = ["REGION", "region_not_found", "shared_memory_region"]
