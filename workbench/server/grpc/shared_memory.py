"""The shared-memory parameters of a request's input or output tensor.

Checked as Triton 2.51's ``ParseSharedMemoryParams`` (``src/grpc/grpc_utils.h``) checks them,
then looked up in the server's registry (``workbench/server/shared_memory.py``) as
``InferGRPCToInput`` and ``InferAllocatorPayload`` do: the offset defaults to 0, and both
numbers are int64 values that Triton reads as ``size_t`` (a negative one is out of range).
"""

from __future__ import annotations

from typing import Any

from workbench.core.request import InferRequest, OutputMemory, SharedMemoryUse
from workbench.errors import InvalidArgumentError
from workbench.server.shared_memory import SharedMemoryRegistry, lease, lease_output

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


def tensor_memory(
    tensor: Any, region: str, request: InferRequest, regions: SharedMemoryRegistry | None
) -> memoryview:
    """The bytes of ``region`` that a checked input names, in use by ``request`` from now."""
    use, offset, byte_size = _sizes(tensor, request)
    return lease(regions, use, region, offset, byte_size)


def output_memory(
    tensor: Any, region: str, request: InferRequest, regions: SharedMemoryRegistry | None
) -> OutputMemory:
    """Where in ``region`` a checked output is to be written, in use by ``request`` from
    now."""
    use, offset, byte_size = _sizes(tensor, request)
    return lease_output(regions, use, region, offset, byte_size)


def _sizes(tensor: Any, request: InferRequest) -> tuple[SharedMemoryUse, int, int]:
    """The request's use of regions, and the offset and byte size a tensor names."""
    params = tensor.parameters
    offset = params[_SIZES[0]].int64_param if _SIZES[0] in params else 0
    byte_size = params[_SIZES[1]].int64_param
    use = request.shared_memory = request.shared_memory or SharedMemoryUse()
    return use, offset, byte_size


__all__ = ["REGION", "output_memory", "shared_memory_region", "tensor_memory"]
