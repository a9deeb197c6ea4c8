"""The server's registry of system shared-memory regions, shared by HTTP and gRPC.

Mirrors ``SharedMemoryManager`` of Triton 2.51 (``src/shared_memory_manager.cc``): a client
creates a POSIX shared-memory object (``tritonclient.utils.shared_memory`` puts it under
``/dev/shm``), registers a region of it by name (key, offset, byte size), then names that
region in an infer request's ``shared_memory_region`` parameters. The region is mapped once,
at register, and unmapped at unregister or when the server stops; inputs are numpy views of
the mapping (no copy), outputs are copied into it once.

Every error text and category is Triton's. Where 2.51 misbehaves this follows what it means
(and what later releases do), each said where it happens: a second region of a key already
registered gets its own descriptor (2.51 reuses a closed one), and a region's register offset
counts once (2.51 adds it twice when reading).

CUDA shared memory is not implemented: registering a CUDA region is refused as by a Triton
built without GPU support, and "cuda_shared_memory" is not advertised.

The registry is used from the server's event loop only (HTTP and gRPC both serve there).
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workbench.core.request import InferResponse, SharedMemoryUse
from workbench.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
)
from workbench.server.tensor_bytes import tensor_buffer

#: where glibc's ``shm_open`` keeps POSIX shared-memory objects on Linux
SHM_DIRECTORY = "/dev/shm"
SYSTEM, CUDA = "system", "cuda"
#: sizes and offsets arrive as C's ``size_t``: a negative gRPC int64 is a huge number there
_SIZE_T = 2**64


@dataclass(slots=True, eq=False)
class Region:
    """One registered system shared-memory region: ``byte_size`` bytes of ``key`` from
    ``offset`` on, mapped into this process."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    #: requests that read or write it now (Triton's ``shared_ptr`` use count, less its own)
    users: int = 0

    def status(self) -> dict[str, Any]:
        """The region's entry in a status reply (``SharedMemoryManager::GetStatus``)."""
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def unmap(self) -> None:
        try:
            self.mapping.close()
        except BufferError:
            pass  # a view outlives its request (an error's traceback): unmapped when it goes


@dataclass(slots=True)
class SharedMemoryRegistry:
    """The regions registered with one server, by name."""

    regions: dict[str, Region] = field(default_factory=dict)

    # -- register, status, unregister --------------------------------------------------------
    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes of the object ``key`` from ``offset`` as region ``name``."""
        if name in self.regions:
            raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        descriptor = _open(key)
        try:
            size = os.fstat(descriptor).st_size
            if (offset + byte_size) % _SIZE_T > size:  # C's size_t sum, as Triton checks it
                raise InvalidArgumentError(
                    f"failed to register shared memory region '{name}': invalid args"
                )
            mapping = _map(name, descriptor, offset, byte_size)
        finally:
            os.close(descriptor)
        self.regions[name] = Region(name, key, offset, byte_size, mapping)

    def status(self, name: str = "", kind: str = SYSTEM) -> list[dict[str, Any]]:
        """Every region of ``kind`` (sorted by name, as Triton's ``std::map``), or the one
        named."""
        if not name:
            return [] if kind == CUDA else [self.regions[n].status() for n in sorted(self.regions)]
        region = self.regions.get(name)
        if region is None:
            raise NotFoundError(f"Unable to find {kind} shared memory region: '{name}'")
        if kind == CUDA:
            raise NotFoundError(
                f"The region named '{name}' is registered as system shared memory, not CUDA "
                "shared memory"
            )
        return [region.status()]

    def unregister(self, name: str = "", kind: str = SYSTEM) -> None:
        """Unmap region ``name`` (every region of ``kind`` when empty); an unknown name, or a
        region of the other kind, is no error (``SharedMemoryManager::UnregisterHelper``)."""
        if kind == CUDA:
            return  # no CUDA region is ever registered here
        if name:
            self._unregister(name)
            return
        failed = []
        for each in list(self.regions):
            try:
                self._unregister(each)
            except InternalError:
                failed.append(each)
        if failed:
            raise InternalError(
                "Failed to unregister the following system shared memory regions: "
                + "".join(f"{each} ," for each in failed)
            )

    def _unregister(self, name: str) -> None:
        region = self.regions.get(name)
        if region is None:
            return
        if region.users:
            raise InternalError(
                f"Cannot unregister shared memory region '{name}', it is currently in use."
            )
        del self.regions[name]
        region.unmap()

    def close(self) -> None:
        """Unmap every region, in use or not (the server is stopping)."""
        regions, self.regions = self.regions, {}
        for region in regions.values():
            region.unmap()

    # -- use by requests ---------------------------------------------------------------------
    def lease(self, use: SharedMemoryUse, name: str, offset: int, byte_size: int) -> memoryview:
        """``byte_size`` bytes of region ``name`` from ``offset``, in use by ``use`` until it is
        released. Checked as ``SharedMemoryManager::GetMemoryInfo`` checks them."""
        region = self.regions.get(name)
        if region is None:
            raise region_not_found(name)
        offset, byte_size = offset % _SIZE_T, byte_size % _SIZE_T
        last = region.byte_size - 1  # 2.51 adds the register offset here, and again when reading
        if offset > last:
            raise InvalidArgumentError(f"Invalid offset for shared memory region: '{name}'")
        if (offset + byte_size - 1) % _SIZE_T > last:
            raise InvalidArgumentError(
                f"Invalid offset + byte size for shared memory region: '{name}'"
            )
        region.users += 1
        use.releases.append(_releaser(region))
        return memoryview(region.mapping)[offset : offset + byte_size]


def region_not_found(name: str) -> NotFoundError:
    return NotFoundError(f"Unable to find shared memory region: '{name}'")


def lease(
    regions: SharedMemoryRegistry | None,
    use: SharedMemoryUse,
    name: str,
    offset: int,
    byte_size: int,
) -> memoryview:
    """``SharedMemoryRegistry.lease``; with no registry (a bare codec) no region exists."""
    if regions is None:
        raise region_not_found(name)
    return regions.lease(use, name, offset, byte_size)


def write_outputs(use: SharedMemoryUse, response: InferResponse) -> None:
    """Copy each output asked for in shared memory into its region (Triton's allocator hands
    the backend that memory; here the one copy happens once the model has answered)."""
    for tensor in response.outputs:
        target = use.outputs.get(tensor.name)
        if target is None:
            continue
        data = tensor_buffer(tensor.array, tensor.datatype)
        if len(data) > len(target):
            raise InternalError(
                f"shared memory size specified with the request for output '{tensor.name}' "
                f"({len(target)} bytes) should be at least {len(data)} bytes to hold the "
                "results"
            )
        target[: len(data)] = data


def _releaser(region: Region) -> Callable[[], None]:
    def release() -> None:
        region.users -= 1

    return release


def _open(key: str) -> int:
    """glibc's ``shm_open(key, O_RDWR)``: leading slashes dropped, no other slash allowed."""
    name = key.lstrip("/")
    if name and "/" not in name and name not in (".", ".."):
        try:
            return os.open(os.path.join(SHM_DIRECTORY, name), os.O_RDWR)
        except OSError:
            pass
    raise InternalError(f"Unable to open shared memory region: '{key}'")


def _map(name: str, descriptor: int, offset: int, byte_size: int) -> mmap.mmap:
    """``mmap(byte_size, offset)``; Triton's text with ``strerror`` when the system refuses."""
    try:
        if byte_size == 0:  # mmap(2) refuses a length of 0 (Python would map the whole file)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return mmap.mmap(descriptor, byte_size, mmap.MAP_SHARED, offset=offset)
    except (OSError, OverflowError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise InvalidArgumentError(
            f"failed to register shared memory region '{name}': unable to process address "
            f"space{reason}"
        ) from None


__all__ = [
    "CUDA",
    "SYSTEM",
    "Region",
    "SharedMemoryRegistry",
    "lease",
    "region_not_found",
    "write_outputs",
]
