"""Triton's generate extension: JSON conversion, SSE framing, errors, client disconnects.

Expected bytes come from Triton 2.51 (``src/http_server.cc``: ``HandleGenerate``,
``GenerateRequestClass``) and from real tritonserver's replies recorded in
``docs/triton-scheduling-facts.md`` ("Decoupled python model").
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from tests.server.conftest import RunningServer
from tests.server.fake_core import FakeCore
from workbench._types import Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import (
    InternalError,
    InvalidArgumentError,
    UnsupportedError,
    WorkbenchError,
)
from workbench.server.hosting import Server
from workbench.server.http.generate import GenerateReply
from workbench.server.http.generate_codec import (
    decode_generate_request,
    encode_generate_response,
    input_metadata,
)

SSE = "text/event-stream; charset=utf-8"
NOT_ONE = (
    b'{"error":"generate expects model to produce exactly 1 response, use generate stream for '
    b'model that generates various number of responses"}'
)


def decode(model: str, body: Any) -> InferRequest:
    inputs = input_metadata(FakeCore().model_metadata(model))
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return decode_generate_request(raw, model, "", inputs)


# -- request JSON -> inputs and parameters -------------------------------------------------------
@pytest.mark.parametrize(
    ("model", "body", "name", "shape"),
    [
        ("repeat", {"COUNT": 3}, "COUNT", (1,)),  # a scalar is one element
        ("repeat", {"COUNT": [3]}, "COUNT", (1,)),
        ("repeat", {"COUNT": [[3]]}, "COUNT", (1,)),  # the top-level count; leaves must match
        ("add_one", {"INPUT0": list(range(16))}, "INPUT0", (1, 16)),  # metadata [-1, 16]
        ("add_one", {"INPUT0": list(range(32))}, "INPUT0", (2, 16)),
        ("strings", {"INPUT0": ["a", "b", "c"]}, "INPUT0", (3,)),  # [-1] takes the count
        ("tokens", {"text_input": "hi there"}, "text_input", (1,)),
        ("two_in", {"A": [1, 2], "parameters": {"B": [3, 4]}}, "B", (2,)),  # inputs nest too
    ],
)
def test_inputs_take_the_metadata_shape(
    model: str, body: dict[str, Any], name: str, shape: tuple[int, ...]
) -> None:
    assert decode(model, body).inputs[name].shape == shape


def test_input_values_and_datatypes() -> None:
    request = decode("two_in", {"A": [1, 2], "B": [3, 4]})
    assert request.inputs["A"].datatype == "INT32"
    np.testing.assert_array_equal(request.inputs["A"].array, np.array([1, 2], np.int32))
    tokens = decode("tokens", {"text_input": "héllo"}).inputs["text_input"]
    assert tokens.datatype == "BYTES" and tokens.array.tolist() == ["héllo".encode()]
    floats = decode("add_one", {"INPUT0": [0.5] * 16}).inputs["INPUT0"].array
    assert floats.dtype == np.float32 and floats[0, 0] == 0.5


def test_other_keys_are_request_parameters_id_included() -> None:
    body = {
        "id": "42",
        "COUNT": 1,
        "text": "x",
        "stream": True,
        "parameters": {"temperature": 0.5, "max_tokens": 7},
        "huge": 1 << 64,  # not an int64: a double, as rapidjson reads it
    }
    request = decode("repeat", body)
    assert request.id == "42"
    assert request.parameters == {
        "id": "42",
        "text": "x",
        "stream": True,
        "temperature": 0.5,
        "max_tokens": 7,
        "huge": float(1 << 64),
    }
    assert isinstance(request.parameters["stream"], bool)
    assert set(request.inputs) == {"COUNT"}


BAD_BODIES = [
    (b"{x", InternalError, "failed to parse the request JSON buffer: "),
    (b"[1]", InternalError, "attempt to get members for non-object"),
    (b'{"id": 3, "COUNT": 1}', InternalError,
     "Unable to parse 'id': attempt to access JSON non-string as string"),
    (b'{"COUNT": 1, "parameters": 3}', InternalError,
     "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as "
     "object"),
    (b'{"COUNT": 1, "x": [1]}', InvalidArgumentError,
     "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'."),
    (b'{"COUNT": 1, "x": null}', InvalidArgumentError, "parameter 'x' has invalid type."),
    (b'{"COUNT": 1, "parameters": {"parameters": {}}}', InvalidArgumentError,
     "Converting keyword: 'parameters': parameter 'parameters' has invalid type."),
    (b'{"COUNT": [1, 2]}', InvalidArgumentError,
     "The schema can not convert input 'COUNT' to tensor with proper shape"),
    (b'{"COUNT": []}', InvalidArgumentError,
     "The schema can not convert input 'COUNT' to tensor with proper shape"),
    (b'{"COUNT": [[1, 2]]}', InternalError,
     "Unable to parse 'data': Shape does not match true shape of 'data' field"),
    (b'{"COUNT": 1.5}', InternalError,
     "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    (b'{"COUNT": "3"}', InternalError, "Unable to parse 'data': attempt to access JSON"),
    (b'{"parameters": {"COUNT": true}}', InternalError,
     "Converting keyword: 'parameters': Unable to parse 'data': attempt to access JSON"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "error", "message"), BAD_BODIES)
def test_bad_bodies_fail_with_tritons_texts(
    body: bytes, error: type[WorkbenchError], message: str
) -> None:
    with pytest.raises(error) as caught:
        decode("repeat", body)
    assert type(caught.value) is error and str(caught.value).startswith(message)


def test_bytes_and_half_inputs_fail_as_in_triton() -> None:
    with pytest.raises(InternalError, match="^Unable to parse JSON bytes array: attempt to access"):
        decode("tokens", {"text_input": 5})
    with pytest.raises(InvalidArgumentError) as caught:  # the core's text: leaves do not fit
        decode("tokens", {"id": "7", "text_input": [["a", "b"]]})
    assert str(caught.value) == (
        "[request id: 7] unexpected number of string elements 2 for inference input "
        "'text_input' for model 'tokens', expecting 1"
    )
    with pytest.raises(InvalidArgumentError, match="receiving FP16 data via JSON"):
        decode("half", {"INPUT0": [1, 2, 3, 4]})


def test_parameters_named_like_an_input_is_refused() -> None:
    inputs = {"parameters": {"name": "parameters", "datatype": "INT32", "shape": [1]}}
    with pytest.raises(InvalidArgumentError, match="Keyword 'parameters' for nested schema"):
        decode_generate_request(b'{"parameters": {}}', "m", "", inputs)


# -- response -> JSON ----------------------------------------------------------------------------
def response(*outputs: Tensor, final: bool = False, **extra: Any) -> InferResponse:
    return InferResponse("m", "1", outputs=list(outputs), final=final, **extra)


def int_tensor(name: str, values: list[int]) -> Tensor:
    return Tensor(name, "INT32", np.array(values, np.int32))


def test_response_keys_in_byte_order_and_one_element_unwrapped() -> None:
    out = response(
        int_tensor("OUT", [7]),
        int_tensor("b_list", [1, 2]),
        Tensor("text_output", "BYTES", np.array([[b"hi"]], dtype=np.object_)),
        Tensor("empty", "FP32", np.zeros((0,), np.float32)),
        id="r1",
        parameters={"p_int": 3, "p_bool": False, "p_str": "s", "p_float": 0.25},
    )
    assert encode_generate_response(out) == (
        b'{"OUT":7,"b_list":[1,2],"empty":[],"id":"r1","model_name":"m","model_version":"1",'
        b'"p_bool":false,"p_float":0.25,"p_int":3,"p_str":"s","text_output":"hi"}'
    )


def test_response_names_taken_first_win_as_in_tritons_map() -> None:
    out = response(int_tensor("model_name", [1]), int_tensor("p", [2]), parameters={"p": "x"})
    assert encode_generate_response(out) == b'{"model_name":"m","model_version":"1","p":"x"}'


def test_response_conversion_errors() -> None:
    with pytest.raises(UnsupportedError, match="'TRITONSERVER_PARAMETER_BYTES' which is not"):
        encode_generate_response(response(parameters={"raw": b"x"}))
    half = Tensor("OUT", "FP16", np.zeros(2, np.float16))
    with pytest.raises(InvalidArgumentError, match="sending FP16 data via JSON is not supported"):
        encode_generate_response(response(half))


# -- the reply: status, framing, the core's stream -----------------------------------------------
class Stream:
    """A scripted core stream (responses, then maybe an error) that records being closed."""

    def __init__(self, *items: InferResponse | WorkbenchError, block: bool = False) -> None:
        self.items = list(items)
        self.block = block
        self.pulled = 0
        self.closed = False

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> InferResponse:
        if not self.items:
            if self.block:
                await asyncio.sleep(30)  # until the reply cancels it (bounded)
            raise StopAsyncIteration
        self.pulled += 1
        item = self.items.pop(0)
        if isinstance(item, WorkbenchError):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed = True


def out(value: int, final: bool = False) -> InferResponse:
    return response(int_tensor("OUT", [value]), final=final)


FLAG = response(final=True)  # Triton's final flag without a response


def event(value: int) -> bytes:
    return b'data: {"OUT":%d,"model_name":"m","model_version":"1"}\n\n' % value


def play(
    stream: AsyncIterator[InferResponse], streaming: bool, leave_after: int | None = None
) -> tuple[int, dict[bytes, bytes], list[bytes]]:
    """Run a reply over fake ASGI callables: status, headers, body chunks (in order)."""
    sent: list[dict[str, Any]] = []

    async def main() -> None:
        gone = asyncio.Event()

        async def send(message: Any) -> None:
            sent.append(dict(message))
            if leave_after is not None and len(sent) >= leave_after:
                gone.set()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        await asyncio.wait_for(GenerateReply(stream, streaming).respond(send, receive), 10)

    asyncio.run(main())
    start = sent[0]
    assert start["type"] == "http.response.start"
    chunks = [m["body"] for m in sent[1:]]
    return start["status"], dict(start["headers"]), chunks


def test_stream_sends_one_event_per_response_and_nothing_for_the_flag() -> None:
    stream = Stream(out(0), out(1), out(2), FLAG)
    status, headers, chunks = play(stream, streaming=True)
    assert status == 200
    assert headers == {b"content-type": SSE.encode()}  # chunked: no content-length
    assert chunks == [event(0), event(1), event(2), b""]
    assert stream.closed


@pytest.mark.parametrize("items", [[FLAG], []])
def test_stream_of_no_response_is_an_empty_200(items: list[InferResponse]) -> None:
    assert play(Stream(*items), streaming=True) == (200, {b"content-type": SSE.encode()}, [b""])


def test_stream_stops_at_the_final_response() -> None:
    stream = Stream(out(0), out(1, final=True), out(9))
    assert play(stream, streaming=True)[2] == [event(0), event(1), b""]
    assert stream.pulled == 2 and stream.closed


def test_error_mid_stream_is_an_error_event_after_a_200() -> None:
    stream = Stream(out(0), InternalError("boom"), out(9))
    status, _, chunks = play(stream, streaming=True)
    assert status == 200
    assert chunks == [event(0), b'data: {"error":"boom"}\n\n', b""]
    assert stream.closed


def test_error_as_first_response_sets_the_status_of_the_event_stream() -> None:
    # Triton 2.51 answers 400 whatever the error's code (docs/triton-scheduling-facts.md).
    for error, code in ((InternalError("zero count"), 400), (WorkbenchError("zero count"), 400)):
        status, headers, chunks = play(Stream(error), streaming=True)
        assert (status, headers[b"content-type"]) == (code, SSE.encode())
        assert chunks == [b'data: {"error":"zero count"}\n\n', b""]


def test_conversion_error_is_an_error_event() -> None:
    half = response(Tensor("OUT", "FP16", np.zeros(1, np.float16)))
    status, _, chunks = play(Stream(out(0), half, FLAG), streaming=True)
    assert status == 200
    assert chunks[1] == (
        b'data: {"error":"sending FP16 data via JSON is not supported. Please use the binary '
        b'data format for output"}\n\n'
    )


@pytest.mark.parametrize(
    ("items", "status", "body"),
    [
        ([out(0), FLAG], 200, b'{"OUT":0,"model_name":"m","model_version":"1"}'),
        ([out(0, final=True)], 200, b'{"OUT":0,"model_name":"m","model_version":"1"}'),
        ([out(0), out(1), out(2), FLAG], 200, NOT_ONE),
        ([FLAG], 200, NOT_ONE),
        ([InternalError("boom")], 400, b'{"error":"boom"}'),
        ([out(0), InternalError("boom")], 200, NOT_ONE),
    ],
)
def test_generate_answers_exactly_one_response(
    items: list[InferResponse | WorkbenchError], status: int, body: bytes
) -> None:
    got_status, headers, chunks = play(Stream(*items), streaming=False)
    assert (got_status, headers) == (status, {b"content-type": b"application/json"})
    assert chunks == [body, b""]


def test_client_leaving_closes_the_cores_stream() -> None:
    stream = Stream(out(0), block=True)
    status, _, chunks = play(stream, streaming=True, leave_after=2)  # start + first event
    assert status == 200 and chunks == [event(0)]
    assert stream.closed


# -- over HTTP (uvicorn, the fake core) ----------------------------------------------------------
def raw_post(url: str, path: str, body: bytes) -> tuple[bytes, bytes]:
    """The exact head and body bytes of one HTTP/1.1 exchange (``Connection: close``)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
            % (path.encode(), len(body), body)
        )
        data = b""
        for _ in range(10_000):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


@pytest.mark.integration
def test_sse_bytes_on_the_wire(running: RunningServer) -> None:
    head, body = raw_post(running.url, "/v2/models/repeat/generate_stream", b'{"COUNT": 3}')
    lines = head.lower().split(b"\r\n")
    assert lines[0] == b"http/1.1 200 ok"
    assert b"content-type: text/event-stream; charset=utf-8" in lines
    assert b"transfer-encoding: chunked" in lines
    assert not any(line.startswith(b"content-length") for line in lines)
    one = b'data: {"OUT":%d,"model_name":"repeat","model_version":"1"}\n\n'
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(one % i), one % i) for i in range(3))
    assert body == chunked + b"0\r\n\r\n"


@pytest.mark.integration
def test_sse_with_requests_and_text_output(running: RunningServer) -> None:
    url = f"{running.url}/v2/models/tokens/generate_stream"
    with requests.post(url, json={"text_input": "hello big world"}, stream=True, timeout=10) as r:
        assert r.status_code == 200 and r.headers["content-type"] == SSE
        events = [line for line in r.iter_lines() if line]
    assert [json.loads(e.removeprefix(b"data: "))["text_output"] for e in events] == [
        "hello",
        "big",
        "world",
    ]


@pytest.mark.integration
def test_generate_over_http(running: RunningServer) -> None:
    url = f"{running.url}/v2/models/repeat/versions/1/generate"
    reply = requests.post(url, json={"COUNT": 1, "id": "a"}, timeout=10)
    assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
    assert reply.content == b'{"OUT":0,"id":"a","model_name":"repeat","model_version":"1"}'
    reply = requests.post(url, json={"COUNT": 3}, timeout=10)
    assert (reply.status_code, reply.content) == (200, NOT_ONE)


@pytest.mark.integration
def test_generate_on_a_model_that_is_not_decoupled(running: RunningServer) -> None:
    body = {"A": [1, 2], "B": [3, 4]}
    reply = requests.post(f"{running.url}/v2/models/two_in/generate", json=body, timeout=10)
    assert reply.content == b'{"SUM":[4,6],"model_name":"two_in","model_version":"1"}'
    url = f"{running.url}/v2/models/two_in/generate_stream"
    reply = requests.post(url, json=body, timeout=10)
    assert reply.content == b'data: {"SUM":[4,6],"model_name":"two_in","model_version":"1"}\n\n'


EARLY_ERRORS = [
    ("GET", "/v2/models/repeat/generate", b"", {}, 405, "Method Not Allowed"),
    ("POST", "/v2/models/nope/generate_stream", b"{}", {}, 404, "unknown model"),
    ("POST", "/v2/models/repeat/versions/2/generate", b"{}", {}, 503, "not at ready state"),
    ("POST", "/v2/models/repeat/generate_stream", b"{}", {"Content-Encoding": "gzip"}, 400,
     "Unsupported content-encoding, only 'identity' is supported."),
    ("POST", "/v2/models/repeat/generate_stream", b"", {}, 500,
     "failed to parse the request JSON buffer: The document is empty."),
    ("POST", "/v2/models/repeat/generate_stream", b"{}", {}, 400,
     "[request id: <id_unknown>] expected 1 inputs but got 0 inputs for model 'repeat'. Got "
     "input(s) [], but missing required input(s) ['COUNT']. Please provide all required "
     "input(s)."),
    ("POST", "/v2/models/add_one/generate", b"{}", {}, 400, "expected 1 inputs but got 0"),
    ("POST", "/v2/models/decoupled/infer", b"{}", {}, 501,
     "HTTP end point doesn't support models with decoupled transaction policy"),
]  # fmt: skip


@pytest.mark.integration
@pytest.mark.parametrize(("method", "path", "body", "headers", "status", "error"), EARLY_ERRORS)
def test_errors_before_inference_are_json(
    running: RunningServer,
    method: str,
    path: str,
    body: bytes,
    headers: dict[str, str],
    status: int,
    error: str,
) -> None:
    reply = requests.request(method, running.url + path, data=body, headers=headers, timeout=10)
    assert reply.status_code == status
    assert error in reply.json()["error"]
    expected_type = "text/plain" if path.endswith("/infer") else "application/json"
    assert reply.headers["content-type"] == expected_type


@pytest.mark.integration
def test_error_events_over_http(running: RunningServer) -> None:
    url = f"{running.url}/v2/models/repeat/generate_stream"
    reply = requests.post(url, json={"COUNT": 2, "parameters": {"fail_at": 1}}, timeout=10)
    assert reply.status_code == 200
    assert reply.content.endswith(b'data: {"error":"repeat failed at response 1"}\n\n')
    reply = requests.post(url, json={"COUNT": 2, "parameters": {"fail_at": 0}}, timeout=10)
    assert (reply.status_code, reply.headers["content-type"]) == (400, SSE)
    assert reply.content == b'data: {"error":"repeat failed at response 0"}\n\n'


def wait_for(condition: Any, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.integration
def test_client_disconnect_closes_the_stream_and_the_server_serves_on(
    running: RunningServer,
) -> None:
    host, port = running.address.split(":")
    body = b'{"COUNT": 3, "parameters": {"hang": true}}'
    before = running.core.streams_closed.count("repeat")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v2/models/repeat/generate_stream HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        for _ in range(1000):  # until the first event has arrived
            received += sock.recv(65536)
            if b"\n\n" in received:
                break
        assert b'data: {"OUT":0' in received
    wait_for(lambda: running.core.streams_closed.count("repeat") > before)
    assert requests.get(f"{running.url}/v2/health/live", timeout=10).status_code == 200
    reply = requests.post(f"{running.url}/v2/models/repeat/generate", json={"COUNT": 1}, timeout=10)
    assert reply.status_code == 200


# -- end to end: a decoupled python model behind the real core ----------------------------------
DECOUPLED_CONFIG = """
name: "streamer"
backend: "python"
max_batch_size: 0
input [ { name: "text_input", data_type: TYPE_STRING, dims: [ 1 ] } ]
output [ { name: "text_output", data_type: TYPE_STRING, dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"""
DECOUPLED_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0]
            for word in text.split()[:3]:
                out = pb_utils.Tensor("text_output", np.array([word], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


@pytest.mark.integration
def test_decoupled_python_model_end_to_end(tmp_path: Path) -> None:
    model = tmp_path / "repo" / "streamer"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(DECOUPLED_CONFIG)
    (model / "1" / "model.py").write_text(DECOUPLED_MODEL)
    with Server(tmp_path / "repo", http_port=0, grpc_port=0, metrics_port=0) as server:
        url = f"{server.url}/v2/models/streamer"
        body = {"text_input": "one two three four", "parameters": {"stream": True}}
        reply = requests.post(f"{url}/generate_stream", json=body, timeout=30)
        assert (reply.status_code, reply.headers["content-type"]) == (200, SSE)
        assert reply.content == b"".join(
            b'data: {"model_name":"streamer","model_version":"1","text_output":"%s"}\n\n' % word
            for word in (b"one", b"two", b"three")
        )
        reply = requests.post(f"{url}/generate", json=body, timeout=30)
        assert (reply.status_code, reply.content) == (200, NOT_ONE)
        reply = requests.post(f"{url}/infer", json={"inputs": []}, timeout=30)
        assert reply.status_code == 501
        reply = requests.post(f"{url}/generate_stream", json={}, timeout=30)
        assert reply.status_code == 400 and reply.headers["content-type"] == "application/json"
        assert "missing required input(s) ['text_input']" in reply.json()["error"]
