"""The stub channel's framing: whole, split, batched and oversized frames all arrive intact."""

from __future__ import annotations

import pickle
import socket
import struct
import threading
from collections.abc import Hashable, Iterator

import pytest

from workbench.backends.python._wire_channel import Channel, ChannelClosed, Message


def _frame(message: Message) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack("<I", len(data)) + data


def _by_key(message: Message) -> Hashable:
    return message[1]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, Channel]]:
    ours, theirs = socket.socketpair()
    channel = Channel(theirs, _by_key)
    yield ours, channel
    ours.close()
    channel.close()


def test_messages_split_across_reads_and_batched_in_one(
    pair: tuple[socket.socket, Channel],
) -> None:
    ours, channel = pair
    first, second, third = _frame((0, 1, "a")), _frame((0, 2, "b" * 10)), _frame((0, 3, None))
    data = first + second + third
    # A frame cut inside its length, then inside its body, then the rest with a whole frame.
    cuts = [2, len(first) + 5, len(data)]
    start = 0
    for cut in cuts:
        ours.sendall(data[start:cut])
        start = cut
        if cut == cuts[0]:
            continue
        if cut == cuts[1]:
            assert channel.wait(1) == (0, 1, "a")
    assert channel.wait(3) == (0, 3, None)  # the second one is filed on the way
    assert channel.wait(2) == (0, 2, "b" * 10)


def test_a_frame_longer_than_one_read(pair: tuple[socket.socket, Channel]) -> None:
    ours, channel = pair
    payload = bytes(range(256)) * 1024  # 256 kB: several reads of the channel's chunk
    sender = threading.Thread(target=ours.sendall, args=(_frame((0, 7, payload)),))
    sender.start()
    assert channel.wait(7) == (0, 7, payload)
    sender.join()


def test_read_nowait_files_what_arrived(pair: tuple[socket.socket, Channel]) -> None:
    ours, channel = pair
    assert channel.take_reader()
    with pytest.raises(BlockingIOError):
        channel.read_nowait()
    ours.sendall(_frame((0, 4, "x")) + _frame((0, 5, "y"))[:3])
    assert channel.read_nowait() == [(4, (0, 4, "x"))]
    ours.sendall(_frame((0, 5, "y"))[3:])
    assert channel.read_nowait() == [(5, (0, 5, "y"))]
    ours.close()
    with pytest.raises(ChannelClosed):
        channel.read_nowait()
    channel.give_back_reader()


def test_what_a_peer_sent_just_before_it_died_is_read() -> None:
    """The race a failed ``initialize`` lost under load: the read gives up (nothing for a
    second), the stub replies and exits, and only then is it checked: the reply is read,
    not reported as a dead stub."""
    ours, theirs = socket.socketpair()
    checks: list[bool] = []

    def alive() -> bool:  # the peer replies and dies between the read's timeout and the check
        if not checks:
            ours.sendall(_frame((0, 1, "the reply")))
        checks.append(False)
        return False

    channel = Channel(theirs, _by_key, alive=alive)
    try:
        assert channel.wait(1) == (0, 1, "the reply")
        assert checks == [False]
        with pytest.raises(ChannelClosed):  # then nothing more: closed
            channel.wait(2)
    finally:
        ours.close()
        channel.close()
