"""``benchmarks/slow_reader.py``'s own wire code: the request it pipelines, the replies it reads."""

from __future__ import annotations

import json
import socket
import threading

from benchmarks import slow_reader


def test_the_request_frames_its_header_and_tensor() -> None:
    data = slow_reader.request(1000)
    head, _, body = data.partition(b"\r\n\r\n")
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    header_length = int(fields[b"Inference-Header-Content-Length"])
    assert int(fields[b"Content-Length"]) == len(body) == header_length + 1000
    header = json.loads(body[:header_length])
    assert header["inputs"][0]["shape"] == [1, 1000]
    assert header["inputs"][0]["parameters"] == {"binary_data_size": 1000}


def test_replies_are_read_whole_and_only_full_200s_count() -> None:
    def reply(status: bytes, body: bytes) -> bytes:
        return b"HTTP/1.1 %s X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)

    ours, theirs = socket.socketpair()
    wire = reply(b"200", b"h" * 10 + b"x" * 300_000) + reply(b"400", b"{}") + reply(b"200", b"y")
    writer = threading.Thread(target=theirs.sendall, args=(wire,))
    writer.start()
    try:
        assert slow_reader.read_replies(ours, 3, 300_000) == 1
    finally:
        writer.join()
        ours.close()
        theirs.close()
