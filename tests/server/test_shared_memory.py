"""The shared-memory registry: register, status, unregister, leases and output writes.

Objects are made under ``/dev/shm`` with plain ``os`` calls here (tritonclient's utilities are
exercised by the conformance tests); each test removes what it made.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from workbench._types import Tensor
from workbench.core.request import InferResponse, SharedMemoryUse
from workbench.errors import AlreadyExistsError, InternalError, InvalidArgumentError, NotFoundError
from workbench.server.shared_memory import (
    CUDA,
    SHM_DIRECTORY,
    SharedMemoryRegistry,
    lease,
    write_outputs,
)

MakeKey = Callable[[int], str]

pytestmark = pytest.mark.skipif(not os.path.isdir(SHM_DIRECTORY), reason="no /dev/shm here")


@pytest.fixture
def make_key() -> Iterator[MakeKey]:
    """``make_key(size)``: a new object of ``size`` bytes under /dev/shm; its key."""
    made: list[str] = []

    def make(size: int) -> str:
        name = f"wb_test_{uuid.uuid4().hex}"
        descriptor = os.open(os.path.join(SHM_DIRECTORY, name), os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(descriptor, size)
        os.close(descriptor)
        made.append(name)
        return "/" + name

    yield make
    for name in made:
        os.unlink(os.path.join(SHM_DIRECTORY, name))


@pytest.fixture
def registry() -> Iterator[SharedMemoryRegistry]:
    regions = SharedMemoryRegistry()
    yield regions
    regions.close()


def _write(key: str, offset: int, data: bytes) -> None:
    with open(os.path.join(SHM_DIRECTORY, key.lstrip("/")), "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def _read(key: str, offset: int, size: int) -> bytes:
    with open(os.path.join(SHM_DIRECTORY, key.lstrip("/")), "rb") as handle:
        handle.seek(offset)
        return handle.read(size)


def test_registered_regions_are_listed_by_name_and_one_by_one(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    first, second = make_key(64), make_key(8192)
    registry.register_system("zeta", first, 0, 64)
    registry.register_system("alpha", second, 4096, 4096)
    assert registry.status() == [
        {"name": "alpha", "key": second, "offset": 4096, "byte_size": 4096},
        {"name": "zeta", "key": first, "offset": 0, "byte_size": 64},
    ]
    assert registry.status("zeta") == [{"name": "zeta", "key": first, "offset": 0, "byte_size": 64}]
    assert registry.status(kind=CUDA) == []


def test_a_key_is_found_with_or_without_its_leading_slash(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    key = make_key(16)
    registry.register_system("plain", key.lstrip("/"), 0, 16)
    registry.register_system("slashed", key, 0, 16)  # a second region of the same object
    assert [entry["name"] for entry in registry.status()] == ["plain", "slashed"]


INVALID_ARGS = "failed to register shared memory region 'r': invalid args"
UNMAPPABLE = "failed to register shared memory region 'r': unable to process address space"


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [
        (0, 65, INVALID_ARGS),
        (64, 1, INVALID_ARGS),
        (8, 16, UNMAPPABLE + "Invalid argument"),  # not a multiple of the page size
        (0, 0, UNMAPPABLE + "Invalid argument"),
    ],
)
def test_a_region_beyond_its_object_or_unmappable_is_refused(
    registry: SharedMemoryRegistry, make_key: MakeKey, offset: int, byte_size: int, message: str
) -> None:
    key = make_key(64)
    with pytest.raises(InvalidArgumentError) as info:
        registry.register_system("r", key, offset, byte_size)
    assert str(info.value) == message
    assert registry.status() == []


@pytest.mark.parametrize("key", ["/wb_test_missing_object", "", "/", "/a/b", "/.."])
def test_an_unknown_or_impossible_key_cannot_be_opened(
    registry: SharedMemoryRegistry, key: str
) -> None:
    with pytest.raises(InternalError) as info:
        registry.register_system("r", key, 0, 8)
    assert str(info.value) == f"Unable to open shared memory region: '{key}'"


def test_a_name_is_registered_once(registry: SharedMemoryRegistry, make_key: MakeKey) -> None:
    key = make_key(16)
    registry.register_system("r", key, 0, 16)
    with pytest.raises(AlreadyExistsError, match="shared memory region 'r' already in manager"):
        registry.register_system("r", key, 0, 16)


def test_status_of_unknown_regions_and_of_the_other_kind(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    registry.register_system("r", make_key(16), 0, 16)
    with pytest.raises(NotFoundError, match="Unable to find system shared memory region: 'x'"):
        registry.status("x")
    with pytest.raises(NotFoundError, match="Unable to find cuda shared memory region: 'x'"):
        registry.status("x", CUDA)
    with pytest.raises(NotFoundError) as info:
        registry.status("r", CUDA)
    assert str(info.value) == (
        "The region named 'r' is registered as system shared memory, not CUDA shared memory"
    )


def test_unregister_one_all_unknown_and_cuda(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    for name in ("a", "b", "c"):
        registry.register_system(name, make_key(16), 0, 16)
    registry.unregister("unknown")
    registry.unregister("a", CUDA)  # a system region is not the CUDA kind's to remove
    registry.unregister("a")
    assert [entry["name"] for entry in registry.status()] == ["b", "c"]
    registry.unregister()
    assert registry.status() == []


def test_inputs_are_views_of_the_region_from_its_offset(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    key = make_key(8192)
    _write(key, 4096 + 16, np.arange(4, dtype=np.float32).tobytes())
    registry.register_system("r", key, 4096, 4096)
    use = SharedMemoryUse()
    view = registry.lease(use, "r", 16, 16)
    np.testing.assert_array_equal(np.frombuffer(view, np.float32), np.arange(4))
    _write(key, 4096 + 16, np.full(4, 7, np.float32).tobytes())
    assert np.frombuffer(view, np.float32).tolist() == [7.0] * 4  # the same memory, no copy
    use.release()


@pytest.mark.parametrize(
    ("offset", "byte_size", "message"),
    [
        (64, 1, "Invalid offset for shared memory region: 'r'"),
        (8, 64, "Invalid offset + byte size for shared memory region: 'r'"),
        (0, 0, "Invalid offset + byte size for shared memory region: 'r'"),  # Triton's size_t
        (-8, 8, "Invalid offset for shared memory region: 'r'"),  # a negative gRPC int64
        (0, -64, "Invalid offset + byte size for shared memory region: 'r'"),
    ],
)
def test_a_lease_must_lie_within_the_region(
    registry: SharedMemoryRegistry, make_key: MakeKey, offset: int, byte_size: int, message: str
) -> None:
    registry.register_system("r", make_key(64), 0, 64)
    with pytest.raises(InvalidArgumentError) as info:
        registry.lease(SharedMemoryUse(), "r", offset, byte_size)
    assert str(info.value) == message


def test_an_unknown_region_is_not_found_with_or_without_a_registry(
    registry: SharedMemoryRegistry,
) -> None:
    for regions in (registry, None):
        with pytest.raises(NotFoundError, match="Unable to find shared memory region: 'x'"):
            lease(regions, SharedMemoryUse(), "x", 0, 4)


def test_a_region_in_use_cannot_be_unregistered_until_released(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    registry.register_system("a", make_key(16), 0, 16)
    registry.register_system("b", make_key(16), 0, 16)
    use = SharedMemoryUse()
    view = registry.lease(use, "a", 0, 16)
    with pytest.raises(InternalError) as info:
        registry.unregister("a")
    assert str(info.value) == "Cannot unregister shared memory region 'a', it is currently in use."
    with pytest.raises(InternalError) as info:
        registry.unregister()
    assert str(info.value) == (
        "Failed to unregister the following system shared memory regions: a ,"
    )
    assert [entry["name"] for entry in registry.status()] == ["a"]  # "b" went
    use.release()
    registry.unregister("a")  # even while ``view`` lives on: its mapping goes with it
    assert registry.status() == [] and len(view) == 16


def test_outputs_are_written_into_their_region(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    key = make_key(64)
    registry.register_system("r", key, 0, 64)
    use = SharedMemoryUse()
    use.outputs["OUT"] = registry.lease(use, "r", 8, 32)
    use.outputs["TEXT"] = registry.lease(use, "r", 40, 24)
    response = InferResponse("m", "1")
    response.outputs = [
        Tensor("OUT", "FP32", np.arange(4, dtype=np.float32)),
        Tensor("TEXT", "BYTES", np.array([b"ab", b"c"], dtype=object)),
        Tensor("OTHER", "FP32", np.zeros(100, np.float32)),  # not in shared memory
    ]
    write_outputs(use, response)
    assert _read(key, 8, 16) == np.arange(4, dtype=np.float32).tobytes()
    assert _read(key, 40, 11) == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    use.release()


def test_an_output_larger_than_its_region_is_refused(
    registry: SharedMemoryRegistry, make_key: MakeKey
) -> None:
    registry.register_system("r", make_key(64), 0, 64)
    use = SharedMemoryUse()
    use.outputs["OUT"] = registry.lease(use, "r", 0, 32)
    response = InferResponse("m", "1", outputs=[Tensor("OUT", "FP32", np.zeros(16, np.float32))])
    with pytest.raises(InternalError) as info:
        write_outputs(use, response)
    assert str(info.value) == (
        "shared memory size specified with the request for output 'OUT' (32 bytes) should be at "
        "least 64 bytes to hold the results"
    )
    use.release()


def test_close_unmaps_every_region(registry: SharedMemoryRegistry, make_key: MakeKey) -> None:
    registry.register_system("r", make_key(16), 0, 16)
    registry.lease(SharedMemoryUse(), "r", 0, 16)  # in use: closing stops the server anyway
    registry.close()
    assert registry.status() == []
