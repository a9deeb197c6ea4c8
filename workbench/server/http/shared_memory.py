"""The shared-memory extension's JSON: register bodies and the tensor parameters of an infer.

Read as Triton 2.51 reads them (``src/http_server.cc``): ``HandleSystemSharedMemory`` for a
register body, ``CheckSharedMemoryData`` for a tensor's ``shared_memory_region``,
``shared_memory_offset`` (default 0) and ``shared_memory_byte_size`` (default 0, which no
region can hold), and ``ValidateOutputParameter`` for what an output in shared memory may not
also ask for. Type errors are ``TritonJson``'s texts, ``INTERNAL`` as in Triton.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from workbench.core.request import InferRequest, OutputMemory, SharedMemoryUse
from workbench.errors import InternalError, InvalidArgumentError
from workbench.server.cuda_ipc import HANDLE_BYTES
from workbench.server.http import _json
from workbench.server.http._json import NON_BOOL, NON_STRING, NON_UINT, access_error
from workbench.server.shared_memory import SharedMemoryRegistry, lease, lease_output

REGION = "shared_memory_region"
_OFFSET = "shared_memory_offset"
_BYTE_SIZE = "shared_memory_byte_size"


def register_arguments(body: bytes | bytearray | memoryview) -> tuple[str, int, int]:
    """``key``, ``offset`` and ``byte_size`` of a register request's JSON body."""
    document = _json.loads(body)
    if not isinstance(document, dict) or "key" not in document:
        raise InvalidArgumentError("Shared memory register request has no 'key' field")
    key = document["key"]
    if not isinstance(key, str):
        raise InternalError(f"attempt to access JSON {NON_STRING}")
    offset = _uint(document.get("offset", 0))
    if "byte_size" not in document:
        raise InvalidArgumentError("Shared memory register request has no 'byte_size' field")
    return key, offset, _uint(document["byte_size"])


def cuda_register_arguments(body: bytes | bytearray | memoryview) -> tuple[bytes, int, int]:
    """``raw_handle`` (decoded), ``device_id`` and ``byte_size`` of a CUDA register request's
    JSON body (``HandleCudaSharedMemory``: the handle first, then ``byte_size``, then
    ``device_id``; a handle must decode to a ``cudaIpcMemHandle_t``)."""
    document = _json.loads(body)
    if not isinstance(document, dict) or "raw_handle" not in document:
        raise InvalidArgumentError("Shared memory register request has no 'raw_handle' field")
    handle = _member(document["raw_handle"], "b64")
    if not isinstance(handle, str):
        raise InternalError(f"attempt to access JSON {NON_STRING}")
    byte_size = _uint(_member(document, "byte_size"))
    device_id = _uint(_member(document, "device_id"))
    try:
        raw = base64.b64decode(handle, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != HANDLE_BYTES:
        raise InvalidArgumentError("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
    return raw, device_id, byte_size


def _member(document: Any, name: str) -> Any:
    """TritonJson's ``MemberAs...`` lookup: the member, or its error (the same for a value
    that is not an object, as 2.51 answers)."""
    if not isinstance(document, dict) or name not in document:
        raise InternalError(f"attempt to access non-existing object member '{name}'")
    return document[name]


def _uint(value: Any) -> int:
    if not _is_uint(value):
        raise InternalError(f"attempt to access JSON {NON_UINT}")
    return int(value)


def _is_uint(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_output(params: dict[str, Any]) -> None:
    """An output in shared memory asks for neither classes nor binary data."""
    if "classification" in params:
        raise InvalidArgumentError(
            "Output can't set both 'shared_memory_region' and 'classification'"
        )
    if "binary_data" in params:
        if not isinstance(params["binary_data"], bool):
            raise InternalError(f"Unable to set 'binary_data': attempt to access JSON {NON_BOOL}")
        if params["binary_data"]:
            raise InvalidArgumentError(
                "Output can't set both 'shared_memory_region' and 'binary_data'"
            )


def tensor_memory(
    params: dict[str, Any], request: InferRequest, regions: SharedMemoryRegistry | None
) -> memoryview:
    """The bytes of the region an input's parameters name, in use by ``request`` from now."""
    use, name, offset, byte_size = _region_parameters(params, request)
    return lease(regions, use, name, offset, byte_size)


def output_memory(
    params: dict[str, Any], request: InferRequest, regions: SharedMemoryRegistry | None
) -> OutputMemory:
    """Where in its region an output's parameters ask it to be written, in use by
    ``request`` from now."""
    use, name, offset, byte_size = _region_parameters(params, request)
    return lease_output(regions, use, name, offset, byte_size)


def _region_parameters(
    params: dict[str, Any], request: InferRequest
) -> tuple[SharedMemoryUse, str, int, int]:
    """The request's use of regions, and the region, offset and byte size a tensor names."""
    name = params[REGION]
    if not isinstance(name, str):
        raise access_error(REGION, NON_STRING)
    offset = params.get(_OFFSET, 0)
    if not _is_uint(offset):
        raise access_error(_OFFSET, NON_UINT)
    byte_size = params.get(_BYTE_SIZE, 0)
    if not _is_uint(byte_size):
        raise access_error(_BYTE_SIZE, NON_UINT)
    use = request.shared_memory = request.shared_memory or SharedMemoryUse()
    return use, name, offset, byte_size


__all__ = [
    "REGION",
    "check_output",
    "cuda_register_arguments",
    "output_memory",
    "register_arguments",
    "tensor_memory",
]
