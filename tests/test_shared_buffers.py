"""Buffers a child process maps without a copy (issue #12: one copy of a large request).

The HTTP front end reads a large body into such a buffer; a stub process maps the tensors it
finds there instead of receiving a copy. A child here stands in for the stub.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from workbench import shared_buffers

pytestmark = pytest.mark.skipif(
    not shared_buffers.available(), reason="needs memfd_create and /proc"
)

_CHILD = """
import sys
import numpy as np
from workbench import shared_buffers
pid, fd, inode, offset, count = map(int, sys.argv[1:])
mapping = shared_buffers.map_ref((pid, fd, inode, offset))
array = np.ndarray((count,), np.float32, mapping, offset)
print(float(array.sum()))
array[:] = -1.0  # copy-on-write: the parent never sees it
print(float(array.sum()))
"""


def _in_child(*args: object) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.split()


def test_a_child_reads_a_tensor_in_place_and_its_writes_stay_its_own() -> None:
    view = shared_buffers.allocate(1 << 20)
    body = np.frombuffer(view, dtype=np.float32)
    body[:] = 0.0
    tensor = body[1000:2000]  # a tensor somewhere inside the body, as a decoder views it
    tensor[:] = np.arange(1000, dtype=np.float32)
    ref = shared_buffers.ref_of(tensor)
    assert ref is not None
    assert ref[0] == os.getpid() and ref[3] == 1000 * 4
    assert _in_child(*ref, 1000) == [str(float(np.arange(1000).sum())), "-1000.0"]
    assert tensor[999] == 999.0  # the child's writes did not reach this process


def test_only_contiguous_arrays_inside_a_live_buffer_have_a_reference() -> None:
    view = shared_buffers.allocate(1 << 16)
    inside = np.frombuffer(view, dtype=np.uint8)
    assert shared_buffers.ref_of(inside[16:32]) is not None
    assert shared_buffers.ref_of(inside[::2]) is None  # not contiguous: would need a gather
    assert shared_buffers.ref_of(np.zeros(16, np.uint8)) is None  # ordinary memory


def test_the_descriptor_closes_once_the_last_view_is_gone() -> None:
    view = shared_buffers.allocate(1 << 16)
    array = np.frombuffer(view, dtype=np.uint8)
    ref = shared_buffers.ref_of(array)
    assert ref is not None
    fd = ref[1]
    assert os.fstat(fd).st_ino == ref[2]
    del view
    gc.collect()
    assert shared_buffers.ref_of(array) is not None  # a numpy view still holds the buffer
    del array
    gc.collect()
    try:
        still_open = os.fstat(fd).st_ino == ref[2]
    except OSError:
        still_open = False
    assert not still_open


def test_a_reference_to_another_file_is_refused() -> None:
    view = shared_buffers.allocate(1 << 16)
    ref = shared_buffers.ref_of(np.frombuffer(view, dtype=np.uint8))
    assert ref is not None
    pid, fd, inode, offset = ref
    with pytest.raises(OSError, match="no longer the shared buffer"):
        shared_buffers.map_ref((pid, fd, inode + 1, offset))
    with pytest.raises(OSError):
        shared_buffers.map_ref((pid, 1 << 20, inode, offset))  # no such descriptor


def test_a_child_can_map_the_probe() -> None:
    probe = shared_buffers.probe_ref()
    gc.collect()
    assert not shared_buffers.any_live()  # the probe never makes the usual check slower
    code = (
        "import sys; from workbench import shared_buffers; "
        f"print(shared_buffers.can_map({probe!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "True"
    assert not shared_buffers.can_map(None)
