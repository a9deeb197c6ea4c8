"""Writing replies: a large binary output goes out beside its head, never joined (issue #12)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from workbench.server.http.messages import Reply, send_reply
from workbench.server.http.replies import JOIN_BELOW, StreamSender, reply_head, write_reply


class Transport:
    """Records what a reply hands to the transport, as uvloop would keep it (unjoined)."""

    def __init__(self) -> None:
        self.writes: list[list[Any]] = []

    def write(self, data: bytes) -> None:
        self.writes.append([data])

    def writelines(self, parts: Any) -> None:
        self.writes.append(list(parts))


def test_a_reply_with_parts_hands_them_over_as_they_are() -> None:
    output = np.arange(JOIN_BELOW, dtype=np.float32)
    part = output.data.cast("B")
    reply = Reply(200, b'{"outputs":[]}', [(b"content-type", b"application/octet-stream")])
    reply.more = (part,)
    transport = Transport()
    write_reply(transport, reply, keep_alive=True)
    [written] = transport.writes
    head, json_header, data = written
    assert data is part  # the output's own memory, not a copy
    assert json_header == b'{"outputs":[]}'
    assert b"content-length: %d\r\n" % (len(json_header) + output.nbytes) in head


def test_a_small_reply_is_one_write_and_a_head_request_gets_the_length_only() -> None:
    transport = Transport()
    write_reply(transport, Reply(200, b"{}"), keep_alive=False)
    write_reply(transport, Reply(200, b"x" * JOIN_BELOW), keep_alive=True, head_only=True)
    small, head_only = transport.writes
    assert len(small) == 1 and bytes(small[0]).endswith(b"connection: close\r\n\r\n{}")
    assert bytes(head_only[0]).endswith(b"content-length: %d\r\n\r\n" % JOIN_BELOW)


def test_the_asgi_path_sends_the_parts_after_the_body() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    reply = Reply(200, b"head", more=(memoryview(b"one"), b"two"))
    asyncio.run(send_reply(send, reply))
    start, *bodies = sent
    assert (b"content-length", b"10") in start["headers"]
    assert [(m["body"], m["more_body"]) for m in bodies] == [
        (b"head", True),
        (b"one", True),
        (b"two", False),
    ]


def test_a_remembered_head_is_the_one_made_for_it_and_a_copy() -> None:
    headers = [(b"content-type", b"application/octet-stream"), (b"x-a", b"1")]
    made = bytes(reply_head(200, headers, keep_alive=True, length=12))
    assert made == (
        b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\ncontent-type: application/octet-stream\r\n"
        b"x-a: 1\r\n\r\n"
    )
    again = reply_head(200, list(headers), keep_alive=True, length=12)
    again += b"body"  # the caller's own copy
    assert reply_head(200, headers, keep_alive=True, length=12) == made
    assert reply_head(200, headers, keep_alive=False, length=12).endswith(
        b"connection: close\r\n\r\n"
    )
    assert b"content-length: 13" in reply_head(200, headers, keep_alive=True, length=13)
    assert reply_head(404, [[b"x-a", b"1"]], keep_alive=True) == (  # type: ignore[list-item]
        b"HTTP/1.1 404 Not Found\r\nx-a: 1\r\n\r\n"
    )


class SlowClient:
    """A connection whose client reads nothing until told: each streamed part waits for it."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.read = asyncio.Event()
        self.waits = 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    async def drained(self) -> None:
        self.waits += 1
        await self.read.wait()


def test_a_streamed_reply_sends_its_next_part_only_once_the_client_has_read() -> None:
    async def main() -> None:
        client = SlowClient()
        send = StreamSender(client, keep_alive=True).send
        await send({"type": "http.response.start", "status": 200, "headers": []})
        second = asyncio.ensure_future(
            send({"type": "http.response.body", "body": b"a", "more_body": True})
        )
        await asyncio.sleep(0)
        assert not second.done() and client.waits == 1  # held until the client reads
        client.read.set()
        await second
        await send({"type": "http.response.body", "body": b"b", "more_body": False})
        assert client.waits == 1  # the last part leaves the wait to the connection
        assert client.written[1:] == [b"1\r\na\r\n", b"1\r\nb\r\n0\r\n\r\n"]

    asyncio.run(main())
