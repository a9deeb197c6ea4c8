"""Shared-memory regions give the pages of large free space back, a moment later (#12, #17).

A region grows to the largest message it has carried and never shrinks. Without giving pages
back, one 1 GiB tensor kept 1 GiB resident in the server and again in the stub after its
reply (``benchmarks/large_message_memory.py``). Giving them back after every message made
back-to-back large requests fault every page in again, so the writer gives them back
``release_after_s`` after its last large message. The file's allocated blocks (``st_blocks``)
say how much memory it holds.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from workbench import shared_buffers
from workbench._types import Tensor
from workbench.backends.python._wire_shm import (
    INITIAL_SIZE,
    INLINE_BYTES,
    RELEASE_AT_ONCE_BYTES,
    RELEASE_BYTES,
    BlockWriter,
    Region,
    create_region_fd,
    read_arrays,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="MADV_REMOVE is Linux's")
MIB = 1 << 20


def _held(fd: int) -> int:
    """Bytes of memory the shared file holds."""
    return os.fstat(fd).st_blocks * 512


@pytest.fixture
def regions() -> Iterator[tuple[BlockWriter, Region, int]]:
    fd = create_region_fd()
    # The writer's own release comes an hour after its last large message, so that only the
    # test's explicit ``release()`` gives pages back, however slowly a loaded machine runs it.
    writer = BlockWriter(Region(fd), release_after_s=3600)
    yield writer, Region(fd), fd  # the writer's and the reader's mappings
    os.close(fd)


def _send(writer: BlockWriter, reader: Region, array: np.ndarray) -> list[np.ndarray]:
    block, descs = writer.write_parts([("X", "UINT8", array)])
    return read_arrays(reader, block, descs)


def test_a_freed_large_block_keeps_its_pages_until_the_writer_releases_them(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, fd = regions
    array = np.arange(48 * MIB, dtype=np.uint8)
    [received] = _send(writer, reader, array)
    assert np.array_equal(received, array) and _held(fd) >= 48 * MIB
    del received
    gc.collect()
    assert _held(fd) >= 48 * MIB  # resident for the next large message: no page faults
    assert writer.release() is False  # nothing large is live any more
    assert _held(fd) < RELEASE_BYTES  # the region keeps its size, not its memory
    assert os.fstat(fd).st_size >= 48 * MIB
    again = np.full(48 * MIB, 7, dtype=np.uint8)  # the space is written and read again
    [received] = _send(writer, reader, again)
    assert np.array_equal(received, again)


def test_a_large_block_still_read_keeps_its_pages(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, fd = regions
    array = np.arange(48 * MIB, dtype=np.uint8)
    [received] = _send(writer, reader, array)
    assert writer.release() is True  # ask again later: a large block is live
    assert _held(fd) >= 48 * MIB and np.array_equal(received, array)


def test_the_pages_come_back_by_themselves_after_the_delay() -> None:
    fd = create_region_fd()
    try:
        writer, reader = BlockWriter(Region(fd), release_after_s=0.05), Region(fd)
        [received] = _send(writer, reader, np.ones(32 * MIB, dtype=np.uint8))
        assert _held(fd) >= 32 * MIB
        del received
        gc.collect()
        for _ in range(400):  # bounded: up to ~20 s on a stalled machine
            if _held(fd) < RELEASE_BYTES:
                break
            time.sleep(0.05)
        assert _held(fd) < RELEASE_BYTES
    finally:
        os.close(fd)


def test_a_small_block_keeps_its_pages_for_the_next_message(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, fd = regions
    [received] = _send(writer, reader, np.ones(RELEASE_BYTES // 2, dtype=np.uint8))
    held = _held(fd)
    del received
    gc.collect()
    assert _held(fd) == held  # no system call for the usual, small messages


def test_a_huge_block_gives_its_pages_back_as_soon_as_its_arrays_are_gone(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, fd = regions
    size = RELEASE_AT_ONCE_BYTES + 8 * MIB
    [received] = _send(writer, reader, np.ones(size, dtype=np.uint8))
    assert _held(fd) >= size
    del received
    gc.collect()
    assert _held(fd) < RELEASE_BYTES  # at once, without waiting for the writer


# -- tensors left in a shared buffer (a large request body) ---------------------------------


def _body(nbytes: int) -> np.ndarray:
    """A request body the HTTP front end read into a shared buffer, as FP32 values."""
    body = np.frombuffer(shared_buffers.allocate(nbytes), dtype=np.float32)
    body[:] = np.arange(body.size, dtype=np.float32)
    return body


def test_a_large_input_in_a_shared_body_is_referred_to_not_copied(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, fd = regions
    body = _body(8 * MIB)
    big = body[16:]  # a tensor after the request's JSON header
    small = np.arange(2048, dtype=np.int32)  # 8 KiB: too large to travel in the message
    parts = [Tensor("SMALL", "INT32", small), Tensor("BIG", "FP32", big)]
    block, descs = writer.write(parts, share=True)
    assert isinstance(descs[1][4], tuple) and isinstance(descs[0][4], int)
    assert writer.region.size == INITIAL_SIZE  # only the small tensor went into the block
    arrays = read_arrays(reader, block, descs)
    assert np.array_equal(arrays[0], small) and np.array_equal(arrays[1], big)
    arrays[1][0] = -1.0  # the reader's copy-on-write pages: the body is untouched
    assert big[0] == 16.0
    # Without ``share`` (a stub that cannot map the server's files) the tensor is copied.
    block, descs = writer.write(parts)
    assert all(isinstance(desc[4], int) for desc in descs)
    assert np.array_equal(read_arrays(reader, block, descs)[1], big)


def test_a_message_of_shared_tensors_only_needs_no_block(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, _ = regions
    body = _body(8 * MIB)
    half = body.size // 2
    block, descs = writer.write(
        [Tensor("A", "FP32", body[:half]), Tensor("B", "FP32", body[half:])], share=True
    )
    assert block == -1
    first, second = read_arrays(reader, block, descs)
    assert np.array_equal(first, body[:half]) and np.array_equal(second, body[half:])


def test_a_small_or_bytes_tensor_in_a_shared_body_is_still_copied(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, _ = regions
    body = _body(8 * MIB)
    names = np.array([b"a", b"bc"], dtype=np.object_)
    block, descs = writer.write(
        [Tensor("SMALL", "FP32", body[:100]), Tensor("NAMES", "BYTES", names)], share=True
    )
    assert not any(isinstance(desc[4], tuple) for desc in descs)  # copied, not referred to
    small, read_names = read_arrays(reader, block, descs)
    assert np.array_equal(small, body[:100]) and list(read_names) == [b"a", b"bc"]


def test_small_tensors_travel_in_the_message_without_a_block(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, _ = regions
    numbers = np.arange(16, dtype=np.float32).reshape(1, 16)
    names = np.array([b"a", b"bc"], dtype=np.object_)
    empty = np.zeros((0, 3), dtype=np.int64)
    parts = [("X", "FP32", numbers), ("NAMES", "BYTES", names), ("E", "INT64", empty)]
    block, descs = writer.write_parts(parts)
    assert block == -1 and [type(desc[4]) for desc in descs] == [bytes, bytes, bytes]
    assert writer.region.map[0] == 0  # nothing was allocated
    read_numbers, read_names, read_empty = read_arrays(reader, block, descs)
    assert np.array_equal(read_numbers, numbers) and read_numbers.dtype == np.float32
    assert list(read_names) == [b"a", b"bc"]
    assert read_empty.shape == (0, 3) and read_empty.dtype == np.int64
    read_numbers[0, 0] = -1.0  # a writable copy, as from a block
    assert numbers[0, 0] == 0.0


def test_tensors_over_the_inline_size_together_go_into_a_block(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, _ = regions
    half = np.ones(INLINE_BYTES // 2, dtype=np.uint8)
    block, descs = writer.write_parts([("A", "UINT8", half), ("B", "UINT8", half)])
    assert block == -1  # exactly INLINE_BYTES: still in the message
    block, descs = writer.write_parts([("A", "UINT8", half), ("B", "UINT8", half[:-1].repeat(2))])
    assert block >= 0 and all(isinstance(desc[4], int) for desc in descs)
    a, b = read_arrays(reader, block, descs)
    assert a.sum() == INLINE_BYTES // 2 and b.sum() == INLINE_BYTES - 2
