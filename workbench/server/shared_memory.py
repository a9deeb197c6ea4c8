"""The server's registry of shared-memory regions (system and CUDA), shared by HTTP and gRPC.

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

CUDA regions (``RegisterCUDASharedMemory``): a client allocates device memory and registers
its IPC handle (``tritonclient.utils.cuda_shared_memory``); the region is opened once, at
register, through the driver (``cuda_ipc.py``), and closed at unregister or when the server
stops. Names are unique across both kinds, as in Triton's one map. An input read from a CUDA
region is copied to host memory once, when the request is decoded (every backend here takes
host arrays, as a Triton CPU model does); an output is copied to the device once, when the
model has answered. Where no NVIDIA driver and GPU are found, registering a CUDA region is
refused as by a Triton built without GPU support, and "cuda_shared_memory" is not advertised.

The registry is used from the server's event loop only (HTTP and gRPC both serve there).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from workbench.core.request import InferResponse, OutputMemory, SharedMemoryUse
from workbench.errors import (
    AlreadyExistsError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
)
from workbench.server.cuda_ipc import CudaError, CudaMemory
from workbench.server.tensor_bytes import tensor_buffer

log = logging.getLogger("workbench.server")

#: where glibc's ``shm_open`` keeps POSIX shared-memory objects on Linux
SHM_DIRECTORY = "/dev/shm"
SYSTEM, CUDA = "system", "cuda"
#: sizes and offsets arrive as C's ``size_t``: a negative gRPC int64 is a huge number there
_SIZE_T = 2**64


@dataclass(slots=True, eq=False)
class Region:
    """One registered system shared-memory region: ``byte_size`` bytes of ``key`` from
    ``offset`` on, mapped into this process."""

    kind: ClassVar[str] = SYSTEM
    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    #: requests that read or write it now (Triton's ``shared_ptr`` use count, less its own)
    users: int = 0

    def read(self, offset: int, byte_size: int) -> memoryview:
        """An input's bytes: a view of the mapping (no copy)."""
        return memoryview(self.mapping)[offset : offset + byte_size]

    def place(self, offset: int, byte_size: int) -> memoryview:
        """Where an output is written: the same view."""
        return self.read(offset, byte_size)

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


@dataclass(slots=True, eq=False)
class CudaRegion:
    """One registered CUDA region: ``byte_size`` bytes at ``pointer`` on GPU ``device_id``,
    opened in this process from a client's IPC handle."""

    kind: ClassVar[str] = CUDA
    name: str
    device_id: int
    byte_size: int
    pointer: int
    driver: CudaMemory
    users: int = 0

    def read(self, offset: int, byte_size: int) -> memoryview:
        """An input's bytes, copied to host memory now."""
        return memoryview(self.driver.read(self.pointer + offset, byte_size, self.device_id))

    def place(self, offset: int, byte_size: int) -> DeviceBytes:
        """Where an output is copied to, once the model has answered."""
        return DeviceBytes(self, self.pointer + offset, byte_size)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def unmap(self) -> None:
        try:
            self.driver.close(self.pointer, self.device_id)
        except CudaError:
            pass  # the client's process (and its allocation) may be gone


@dataclass(frozen=True, slots=True)
class DeviceBytes:
    """An output's place in a CUDA region: ``len`` and slice assignment, as the
    ``memoryview`` of a system region offers them (``write_outputs`` uses both)."""

    region: CudaRegion
    pointer: int
    byte_size: int

    def __len__(self) -> int:
        return self.byte_size

    def __setitem__(self, where: slice, data: Any) -> None:
        start, stop, _ = where.indices(self.byte_size)
        if len(data) != stop - start:
            raise ValueError("the data does not fit the slice")
        self.region.driver.write(self.pointer + start, data, self.region.device_id)


@dataclass(slots=True)
class SharedMemoryRegistry:
    """The regions registered with one server, by name (system and CUDA in one map, as
    Triton's); ``cuda`` is the driver CUDA regions are opened with, ``None`` without a GPU."""

    regions: dict[str, Region | CudaRegion] = field(default_factory=dict)
    cuda: CudaMemory | None = None

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

    def register_cuda(self, name: str, handle: bytes, device_id: int, byte_size: int) -> None:
        """Open the device allocation a client's IPC ``handle`` names as region ``name``.

        As 2.51: a handle that cannot be opened is "invalid args" (the driver's reason goes
        to the log only), and so is a ``byte_size`` larger than the allocation (2.51 leaves
        that handle open; it is closed here)."""
        cuda = self.require_cuda(name)
        if name in self.regions:
            raise AlreadyExistsError(f"shared memory region '{name}' already in manager")
        try:
            pointer = cuda.open(handle, device_id)
        except CudaError as exc:
            log.error("failed to open CUDA IPC handle: %s", exc)
            raise InvalidArgumentError(
                "failed to register shared memory region: invalid args"
            ) from None
        region = CudaRegion(name, device_id, byte_size, pointer, cuda)
        try:
            size = cuda.allocation_size(pointer, device_id)
        except CudaError as exc:
            log.error("Failed to get CUDA address range: %s", exc)
            size = -1
        if byte_size > size:
            region.unmap()
            raise InvalidArgumentError(
                f"failed to register shared memory region '{name}': invalid args"
            )
        self.regions[name] = region

    def require_cuda(self, name: str) -> CudaMemory:
        """The driver CUDA regions are opened with; without one, registering region ``name``
        is refused as by a Triton built without GPU support."""
        if self.cuda is None:
            raise InvalidArgumentError(
                f"failed to register CUDA shared memory region: '{name}', GPUs not supported"
            )
        return self.cuda

    def status(self, name: str = "", kind: str = SYSTEM) -> list[dict[str, Any]]:
        """Every region of ``kind`` (sorted by name, as Triton's ``std::map``), or the one
        named."""
        if not name:
            named = sorted(self.regions)
            return [self.regions[n].status() for n in named if self.regions[n].kind == kind]
        region = self.regions.get(name)
        if region is None:
            raise NotFoundError(f"Unable to find {kind} shared memory region: '{name}'")
        if region.kind != kind:
            registered, asked = ("system", "CUDA") if kind == CUDA else ("CUDA", "system")
            raise NotFoundError(
                f"The region named '{name}' is registered as {registered} shared memory, not "
                f"{asked} shared memory"
            )
        return [region.status()]

    def unregister(self, name: str = "", kind: str = SYSTEM) -> None:
        """Unmap region ``name`` (every region of ``kind`` when empty); an unknown name, or a
        region of the other kind, is no error (``SharedMemoryManager::UnregisterHelper``)."""
        if name:
            self._unregister(name, kind)
            return
        failed = []
        for each in list(self.regions):
            try:
                self._unregister(each, kind)
            except InternalError:
                failed.append(each)
        if failed:
            raise InternalError(
                f"Failed to unregister the following {kind} shared memory regions: "
                + "".join(f"{each} ," for each in failed)
            )

    def _unregister(self, name: str, kind: str) -> None:
        region = self.regions.get(name)
        if region is None or region.kind != kind:
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
        """An input's ``byte_size`` bytes of region ``name`` from ``offset``; the region is in
        use by ``use`` until it is released."""
        region, offset, byte_size = self._take(use, name, offset, byte_size)
        try:
            return region.read(offset, byte_size)
        except CudaError as exc:
            raise InternalError(
                f"failed to copy from CUDA shared memory region '{name}': {exc}"
            ) from None

    def lease_output(
        self, use: SharedMemoryUse, name: str, offset: int, byte_size: int
    ) -> OutputMemory:
        """Where an output goes: ``byte_size`` bytes of region ``name`` from ``offset``."""
        region, offset, byte_size = self._take(use, name, offset, byte_size)
        return region.place(offset, byte_size)

    def _take(
        self, use: SharedMemoryUse, name: str, offset: int, byte_size: int
    ) -> tuple[Region | CudaRegion, int, int]:
        """Region ``name``, now in use by ``use``, with ``offset`` and ``byte_size`` as
        ``size_t`` values, once checked as ``SharedMemoryManager::GetMemoryInfo`` checks
        them."""
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
        return region, offset, byte_size


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
    return _registry(regions, name).lease(use, name, offset, byte_size)


def lease_output(
    regions: SharedMemoryRegistry | None,
    use: SharedMemoryUse,
    name: str,
    offset: int,
    byte_size: int,
) -> OutputMemory:
    """``SharedMemoryRegistry.lease_output``; with no registry no region exists."""
    return _registry(regions, name).lease_output(use, name, offset, byte_size)


def _registry(regions: SharedMemoryRegistry | None, name: str) -> SharedMemoryRegistry:
    if regions is None:
        raise region_not_found(name)
    return regions


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
        try:
            target[: len(data)] = data
        except CudaError as exc:
            raise InternalError(
                f"failed to copy output '{tensor.name}' to CUDA shared memory: {exc}"
            ) from None


def _releaser(region: Region | CudaRegion) -> Callable[[], None]:
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
    "CudaRegion",
    "DeviceBytes",
    "Region",
    "SharedMemoryRegistry",
    "lease",
    "lease_output",
    "region_not_found",
    "write_outputs",
]
