"""Shared-memory regions give the pages of a large freed block back (issue #12).

A region grows to the largest message it has carried and never shrinks. Without giving pages
back, one 1 GiB tensor kept 1 GiB resident in the server and again in the stub after its
reply (``benchmarks/large_message_memory.py``). The file's allocated blocks (``st_blocks``) say
how much memory it holds, with no timing involved.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from workbench.backends.python._shm import (
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
    yield BlockWriter(Region(fd)), Region(fd), fd  # the writer's and the reader's mappings
    os.close(fd)


def _send(writer: BlockWriter, reader: Region, array: np.ndarray) -> list[np.ndarray]:
    block, descs = writer.write_parts([("X", "UINT8", array)])
    return read_arrays(reader, block, descs)


def test_a_large_block_gives_its_pages_back_when_its_arrays_are_gone(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, fd = regions
    array = np.arange(64 * MIB, dtype=np.uint8)
    [received] = _send(writer, reader, array)
    assert np.array_equal(received, array) and _held(fd) >= 64 * MIB
    del received
    gc.collect()
    assert _held(fd) < RELEASE_BYTES  # the region keeps its size, not its memory
    assert os.fstat(fd).st_size >= 64 * MIB
    again = np.full(64 * MIB, 7, dtype=np.uint8)  # the space is written and read again
    [received] = _send(writer, reader, again)
    assert np.array_equal(received, again)


def test_a_small_block_keeps_its_pages_for_the_next_message(
    regions: tuple[BlockWriter, Region, int],
) -> None:
    writer, reader, fd = regions
    [received] = _send(writer, reader, np.ones(RELEASE_BYTES // 2, dtype=np.uint8))
    held = _held(fd)
    del received
    gc.collect()
    assert _held(fd) == held  # no system call for the usual, small messages
