"""Fuzzing what a client controls: the bytes of a request, and a binary infer request's parts.

Over a socket, the real front end serving ``HttpApp`` on the fake core must never crash (no
error logged by the server or its loop), never hang (every read is bounded, and after each
example a health request is answered), and every reply must be well-formed HTTP/1.1; an error
reply carries a JSON ``{"error": "..."}`` with a message. The binary tensor decoder, fed
mangled JSON headers and tails directly, may only raise ``WorkbenchError``s.

Hypothesis runs derandomized without a database, so CI sees the same examples every time; the
example counts keep the file to well under a minute on two cores.
"""

from __future__ import annotations

import json
import logging
import math
import re
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.security.served_frontend import Served, serve_frontend
from tests.server.fake_core import FakeCore
from workbench.config import parse_pbtxt
from workbench.core.request_checks import RequestChecker
from workbench.errors import InvalidArgumentError, WorkbenchError
from workbench.server.http import compression, create_app
from workbench.server.http.request_codec import decode_infer_request, parse_header_length

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: how long a fuzzed exchange may see nothing before it counts as over (a body still awaited:
#: no timeout cuts that); exchanges that must end with the server closing wait ``CLOSE_S``
SILENCE_S = 0.5
CLOSE_S = 10.0
#: the silence window of a whole request sent with ``Connection: close``: it must be answered
#: and the connection closed within it. The server does both at once (milliseconds); the
#: window is longer than ``SILENCE_S`` so that a loaded 2-core machine does not fail it, and
#: short so that a server that hangs fails each example in seconds, shrinking included.
ANSWER_S = 2.0
STATUS_LINE = re.compile(rb"HTTP/1\.1 ([1-5][0-9][0-9]) [\x20-\x7e]*")
TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class ErrorLog(logging.Handler):
    """Collects what the server logs at ERROR or above (an unexpected exception, a task's)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[str]:
        texts = [self.format(record) for record in self.records]
        self.records.clear()
        return texts


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Served, ErrorLog]]:
    errors = ErrorLog()
    loggers = [logging.getLogger("workbench"), logging.getLogger("asyncio")]
    for logger in loggers:
        logger.addHandler(errors)
    app = create_app(FakeCore(), max_input_bytes=1 << 16)  # type: ignore[arg-type]
    try:
        with serve_frontend(
            app, idle_timeout_s=0.05, header_timeout_s=0.1, max_header_bytes=8192
        ) as served:
            yield served, errors
    finally:
        for logger in loggers:
            logger.removeHandler(errors)


# -- reading replies ---------------------------------------------------------------------------
def exchange(served: Served, data: bytes, silence_s: float = CLOSE_S) -> bytes:
    """Send ``data`` on a new connection; everything the server sends until it closes, or until
    it has sent nothing for ``silence_s``."""
    return exchange_until_closed(served, data, silence_s)[0]


def exchange_until_closed(served: Served, data: bytes, silence_s: float) -> tuple[bytes, bool]:
    """``exchange``, and whether the server closed the connection (else it fell silent)."""
    received = b""
    with served.connect(timeout=silence_s) as sock:
        try:
            sock.sendall(data)
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            return received, False
        except (ConnectionResetError, BrokenPipeError):
            pass
    return received, True


def take_head(data: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    assert b"\r\n\r\n" in data, f"a reply cut in its head: {data[:300]!r}"
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    match = STATUS_LINE.fullmatch(status_line)
    assert match, f"malformed status line {status_line!r}"
    headers: dict[bytes, bytes] = {}
    for line in lines:
        name, sep, value = line.partition(b": ")
        assert sep and TOKEN.fullmatch(name), f"malformed header line {line!r}"
        assert name.lower() not in headers, f"header {name!r} twice"
        headers[name.lower()] = value
    return int(match[1]), headers, rest


def take_chunks(data: bytes) -> tuple[bytes, bytes]:
    body = b""
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        assert sep and re.fullmatch(rb"[0-9a-f]+", size_line), f"bad chunk size {size_line!r}"
        size = int(size_line, 16)
        assert data[size : size + 2] == b"\r\n", "a chunk cut or not ended by CRLF"
        body, data = body + data[:size], data[size + 2 :]
        if size == 0:
            return body, data


def check_replies(data: bytes, head_only: bool = False) -> list[int]:
    """Every reply in ``data`` is whole and well-formed; returns their statuses."""
    statuses = []
    while data:
        status, headers, data = take_head(data)
        statuses.append(status)
        if status < 200:
            continue  # 100 Continue: no body
        if headers.get(b"transfer-encoding") == b"chunked":
            assert b"content-length" not in headers
            body, data = take_chunks(data)
        else:
            length = headers.get(b"content-length", b"")
            assert length.isdigit(), f"a reply without a length: {headers}"
            size = 0 if head_only else int(length)
            assert len(data) >= size, "a reply cut in its body"
            body, data = data[:size], data[size:]
        if status >= 400 and not head_only:
            check_error_body(status, body)
    return statuses


def check_error_body(status: int, body: bytes) -> None:
    document = json.loads(body)
    assert isinstance(document, dict), body
    message = document.get("error")
    assert isinstance(message, str) and message.strip(), f"{status} without a message: {body!r}"


def check_server(
    server: tuple[Served, ErrorLog], data: bytes, head_only: bool = False, whole: bool = False
) -> None:
    """``data`` gets well-formed replies, nothing is logged as an error, and the server still
    answers; ``whole``: ``data`` is one framed request with ``Connection: close``, which must
    be answered and the connection closed within ``ANSWER_S`` (silence is no answer)."""
    served, errors = server
    received, closed = exchange_until_closed(served, data, ANSWER_S if whole else SILENCE_S)
    statuses = check_replies(received, head_only)
    if whole:
        assert statuses and closed, f"no reply and close within {ANSWER_S} s: {received[:300]!r}"
    event(f"statuses {statuses}")
    health = exchange(served, b"GET /v2/health/live HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert check_replies(health) == [200], health
    assert errors.take() == []


# -- what both fuzzers draw from ------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


#: values where a JSON field should hold something else, or a number at an edge
ODD: st.SearchStrategy[Any] = (
    st.sampled_from([-1, 2**31, 2**63, 2**64, 1.5, True, None, "8", [], {}]) | json_values
)


def rarely(draw: st.DrawFn, n: int) -> bool:
    """True one time in ``n`` (and False for the simplest example: hypothesis shrinks toward
    the smallest integer, and the usual case should be what the examples mostly are)."""
    return draw(st.integers(1, n)) == n


def sometimes(draw: st.DrawFn, good: Any, bad: st.SearchStrategy[Any] = ODD) -> Any:
    """``good`` nine times in ten, else a value of ``bad``."""
    return draw(bad) if rarely(draw, 10) else good


# -- (a) the HTTP request parser -----------------------------------------------------------------
PATHS = [
    "/",
    "/v2",
    "/v2/health/live",
    "/v2/health/ready",
    "/v2/models/add_one",
    "/v2/models/add_one/ready",
    "/v2/models/add_one/config",
    "/v2/models/add_one/stats",
    "/v2/models/add_one/infer",
    "/v2/models/add_one/versions/1/infer",
    "/v2/models/strings/infer",
    "/v2/models/half/infer",
    "/v2/models/two_in/infer",
    "/v2/models/repeat/generate",
    "/v2/models/repeat/generate_stream",
    "/v2/models/tokens/generate_stream",
    "/v2/models/add_one/trace/setting",
    "/v2/models/stats",
    "/v2/repository/index",
    "/v2/repository/models/add_one/load",
    "/v2/repository/models/nope/unload",
    "/v2/systemsharedmemory/status",
    "/v2/systemsharedmemory/region/r/register",
    "/v2/cudasharedmemory/region/r/unregister",
    "/v2/trace/setting",
    "/v2/logging",
]
PREFIXES = [
    b"GET / HTTP/1.1\r\n",
    b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n",
    b"POST /v2/models/add_one/infer HTTP/1.1\r\nContent-Length: 8\r\n\r\n",
    b"POST /v2/models/add_one/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"PUT /v2 HTTP/1.0\r\n",
]
#: endpoints that take a POST (the others a GET)
POSTED: tuple[str, ...] = ("infer", "generate", "generate_stream", "load", "unload")
POSTED += ("register", "unregister", "index", "setting", "logging")
#: headers the server acts on (or passes by), with values it knows and some it does not
HEADERS = {
    "Host": ["x", ""],
    "Content-Type": ["application/json", "application/octet-stream", ""],
    "Accept-Encoding": ["gzip", "deflate", "gzip;q=0.5, deflate", "br", "*", "gzip;q=x"],
    "Expect": ["100-continue", "nonsense"],
    "Connection": ["keep-alive", "Upgrade"],
    "Upgrade": ["h2c", "websocket"],
    "X-Fuzz": ["1", ""],
}


@st.composite
def infer_documents(draw: st.DrawFn) -> dict[str, Any]:
    """KServe infer JSON near the valid one: right keys, sometimes wrong values."""
    inputs = []
    for _ in range(draw(st.integers(0, 2))):
        spec: dict[str, Any] = {
            "name": draw(st.sampled_from(["INPUT0", "A", "B", "COUNT", "text_input"])),
            "datatype": draw(st.sampled_from(["FP32", "INT32", "BYTES", "FP16", "BOOL", "X"])),
            "shape": sometimes(draw, draw(st.lists(st.integers(0, 16), max_size=2))),
        }
        data = st.lists(st.floats(allow_nan=False) | st.integers() | st.text(max_size=3))
        spec["data"] = sometimes(draw, draw(data), json_values)
        inputs.append(spec)
    document: dict[str, Any] = {"inputs": inputs}
    if rarely(draw, 5):
        document["parameters"] = draw(json_values)
    if rarely(draw, 5):
        document["outputs"] = draw(json_values)
    return document


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A request body and the headers that say how to read it."""
    kind = draw(st.sampled_from(["json", "binary", "generate", "any-json", "bytes", "bomb"]))
    headers: list[bytes] = []
    if kind == "json":
        body = json.dumps(draw(infer_documents())).encode()
    elif kind == "binary":
        body, length = draw(binary_requests())
        if length is not None:
            headers.append(b"Inference-Header-Content-Length: " + length)
    elif kind == "generate":
        fields = {"COUNT": st.integers(-1, 3) | ODD, "text_input": st.text(max_size=12) | ODD}
        optional = {"parameters": json_values, "INPUT0": json_values}
        body = json.dumps(draw(st.fixed_dictionaries(fields, optional=optional))).encode()
    elif kind == "any-json":
        body = json.dumps(draw(json_values)).encode()
    elif kind == "bytes":
        body = draw(st.binary(max_size=64))
    else:  # far more than the fixture's 64 KiB once inflated
        return zlib.compress(b"\0" * 300_000), [b"Content-Encoding: deflate"]
    encoding = draw(st.sampled_from(["", "", "", "gzip", "deflate", "bogus", "br"]))
    if encoding in ("gzip", "deflate"):
        body = compression.compress(body, encoding)
    if encoding:
        headers.append(b"Content-Encoding: " + encoding.encode())
    return body, headers


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, bool, bool]:
    """One request near a valid one, mangled here and there; (bytes, whether it is HEAD,
    whether its body is framed as it says: a whole request)."""
    path = draw(st.sampled_from(PATHS))
    method = "POST" if path.endswith(POSTED) else "GET"
    odd_methods = st.sampled_from(["GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "CONNECT"])
    method = sometimes(
        draw, method, odd_methods | st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1)
    )
    path = sometimes(draw, path, st.text(max_size=20).map("/".__add__))
    query = draw(st.sampled_from(["", "", "?a=1", "?%zz", "#frag"]))
    target = (path + query).encode("utf-8", "surrogatepass")
    version = sometimes(draw, b"HTTP/1.1", st.sampled_from([b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.x"]))
    head = [b"%s %s %s" % (method.encode(), target, version)]
    for name in draw(st.lists(st.sampled_from(sorted(HEADERS)), max_size=3, unique=True)):
        head.append(f"{name}: {draw(st.sampled_from(HEADERS[name]))}".encode())
    if rarely(draw, 10):
        head.append(draw(st.binary(min_size=1, max_size=12)))  # a header line of any bytes
    body, body_headers = draw(bodies())
    head += body_headers
    framing = sometimes(
        draw,
        draw(st.sampled_from(["length", "length", "chunked"])),
        st.sampled_from(["short-length", "none", "double", "both"]),
    )
    if framing in ("chunked", "both"):
        head.append(b"Transfer-Encoding: chunked")
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    if framing in ("length", "double", "both"):
        head += [b"Content-Length: %d" % len(body)] * (2 if framing == "double" else 1)
    elif framing == "short-length":
        head.append(b"Content-Length: %d" % (len(body) // 2))
    head.append(b"Connection: close")  # the server hangs up after its reply: no idle wait
    whole = framing in ("length", "chunked")
    return b"\r\n".join(head) + b"\r\n\r\n" + body, method == "HEAD", whole


@settings(FUZZ, max_examples=120)
@given(
    data=st.binary(max_size=512)
    | st.tuples(st.sampled_from(PREFIXES), st.binary(max_size=256)).map(b"".join)
)
def test_arbitrary_bytes_get_well_formed_replies_and_the_server_serves_on(
    server: tuple[Served, ErrorLog], data: bytes
) -> None:
    check_server(server, data)


@settings(FUZZ, max_examples=400)
@given(request=requests())
def test_mangled_requests_get_well_formed_replies_and_the_server_serves_on(
    server: tuple[Served, ErrorLog], request: tuple[bytes, bool, bool]
) -> None:
    check_server(server, *request)


def test_a_whole_request_that_gets_no_answer_fails_the_check(
    server: tuple[Served, ErrorLog],
) -> None:
    # what the check above guards against: silence after a request (here the server waits for
    # the body's missing bytes) passed as "no replies, all well-formed" before ``whole``
    silent = b"POST /v2/models/add_one/infer HTTP/1.1\r\nContent-Length: 10\r\n\r\n{}"
    assert check_replies(exchange(server[0], silent, SILENCE_S)) == []
    with pytest.raises(AssertionError, match="no reply and close"):
        check_server(server, silent, whole=True)


# -- (b) the binary tensor decoder ---------------------------------------------------------------
ITEMSIZE = {"BOOL": 1, "UINT8": 1, "INT32": 4, "INT64": 8, "UINT64": 8, "FP16": 2, "FP32": 4}
ITEMSIZE |= {"FP64": 8, "BF16": 2}
#: shapes of at most one element that are at numpy's edges: dims past its index range beside
#: a 0, more dimensions than it holds
EDGE_SHAPES = st.lists(
    st.sampled_from([1, 2**31, 2**60 - 1, 2**60, 2**63, 2**64]), min_size=1, max_size=2
).map(lambda dims: [0, *dims]) | st.lists(st.integers(0, 1), min_size=30, max_size=40)


@st.composite
def string_elements(draw: st.DrawFn, count: int) -> bytes:
    """``count`` length-prefixed BYTES elements; now and then a lying length."""
    data = b""
    for _ in range(count):
        item = draw(st.binary(max_size=6))
        length = sometimes(draw, len(item), st.integers(0, 2**32 - 1))
        data += length.to_bytes(4, "little") + item
    return data


@st.composite
def binary_inputs(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """One input of a binary request and its tensor bytes, consistent nine times in ten per
    field; JSON ``data`` or shared memory in place of the bytes now and then."""
    datatype = draw(st.sampled_from([*ITEMSIZE, "BYTES"]))
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    shape = draw(EDGE_SHAPES) if rarely(draw, 8) else shape
    count = math.prod(shape)
    if datatype == "BYTES":
        data = draw(string_elements(sometimes(draw, count, st.integers(0, 5))))
    else:
        data = draw(
            st.binary(min_size=count * ITEMSIZE[datatype], max_size=count * ITEMSIZE[datatype])
        )
        data = sometimes(draw, data, st.binary(max_size=40))
    params: dict[str, Any] = {"binary_data_size": sometimes(draw, len(data))}
    kind = draw(st.integers(0, 19))
    if kind == 19:
        params = {"shared_memory_region": draw(json_values)}
    elif kind == 18:
        params = {}
    spec: dict[str, Any] = {
        "name": sometimes(draw, draw(st.sampled_from(["INPUT0", "B"]))),
        "datatype": sometimes(draw, datatype, st.sampled_from(["X", "TYPE_FP32", ""]) | ODD),
        "shape": sometimes(draw, shape, st.lists(ODD, max_size=3) | ODD),
        "parameters": sometimes(draw, params),
    }
    if kind in (17, 18):
        spec["data"] = draw(st.lists(st.integers() | st.floats() | st.text(max_size=3), max_size=8))
    return spec, data


@st.composite
def binary_requests(draw: st.DrawFn) -> tuple[bytes, bytes | None]:
    """(body, Inference-Header-Content-Length): a JSON header, then the inputs' bytes."""
    inputs = draw(st.lists(binary_inputs(), max_size=3))
    document: dict[str, Any] = {"inputs": [spec for spec, _ in inputs]}
    if draw(st.booleans()):
        document["id"] = sometimes(draw, draw(st.text(max_size=4)))
    if rarely(draw, 5):
        document["parameters"] = draw(st.dictionaries(st.text(max_size=6), ODD, max_size=3))
    if draw(st.booleans()):
        output_params = st.fixed_dictionaries({}, optional={"binary_data": ODD | st.booleans()})
        output = st.fixed_dictionaries(
            {"name": st.just("OUTPUT0") | ODD}, optional={"parameters": output_params}
        )
        document["outputs"] = sometimes(draw, draw(st.lists(output, max_size=2)))
    header = json.dumps(document).encode()
    tail = b"".join(data for _, data in inputs)
    tail = sometimes(draw, tail, st.binary(max_size=64))
    length = sometimes(
        draw,
        b"%d" % len(header),
        st.sampled_from([b"0", b"-3", b" 5 ", b"x", b"99999", b""]) | st.none(),
    )
    return header + tail, length


@settings(FUZZ, max_examples=1000)
@given(request=binary_requests())
def test_the_binary_tensor_decoder_raises_only_workbench_errors(
    request: tuple[bytes, bytes | None],
) -> None:
    body, length_header = request
    for _ in range(2):  # the second decode may take the cached plan of the first
        try:
            length = parse_header_length(length_header, len(body))
            if length != 0:  # 0: the raw binary layout, decoded from the model's config
                decode_infer_request(body, length, "m")
        except WorkbenchError as exc:
            event(f"{type(exc).__name__}: {str(exc)[:40]}")
        else:
            event("decoded")


# -- what the fuzzing found, kept as regressions -------------------------------------------------
ADD_ONE = parse_pbtxt(
    'name: "add_one" max_batch_size: 8 input { name: "INPUT0" data_type: TYPE_FP32 dims: 16 }'
    ' output { name: "OUTPUT0" data_type: TYPE_FP32 dims: 16 }'
)


def unholdable_input(shape: list[int], binary: bool) -> tuple[bytes, int]:
    """A consistent FP32 request of at most one element whose shape no array can have:
    (body, header length)."""
    count = math.prod(shape)
    spec: dict[str, Any] = {"name": "INPUT0", "datatype": "FP32", "shape": shape}
    if binary:
        spec["parameters"] = {"binary_data_size": 4 * count}
    else:
        spec["data"] = [1.0] * count
    header = json.dumps({"inputs": [spec]}).encode()
    return header + (b"\0" * 4 * count if binary else b""), len(header)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize(
    "shape", [[0, 2**63], [0, 2**60], [1] * 40], ids=["past-intp", "bytes-overflow", "40-dims"]
)
def test_a_shape_no_array_can_have_is_an_invalid_argument(shape: list[int], binary: bool) -> None:
    body, length = unholdable_input(shape, binary)
    checker = RequestChecker(ADD_ONE)
    for _ in range(2):  # the second time through the plan the first may have cached
        # no array: the codec leaves it to the core, which refuses the shape as Triton does
        request, _ = decode_infer_request(body, length, "add_one")
        assert request.deferred_inputs and request.inputs["INPUT0"].array.size == 0
        with pytest.raises(InvalidArgumentError, match="unexpected shape"):
            checker.check(request)


def test_a_shape_no_array_can_have_gets_400_over_http(server: tuple[Served, ErrorLog]) -> None:
    body, length = unholdable_input([0, 2**63], binary=True)
    request = (
        b"POST /v2/models/add_one/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
        % (length, len(body), body)
    )
    assert check_replies(exchange(server[0], request)) == [400]
    assert server[1].take() == []


def test_a_refused_head_request_is_answered_without_a_body(server: tuple[Served, ErrorLog]) -> None:
    received = exchange(server[0], b"HEAD / HTTP/1.1\r\nHost: \x1f\r\n\r\n")
    status, headers, rest = take_head(received)
    assert (status, rest) == (400, b"")
    assert int(headers[b"content-length"]) > 0  # the length of the body a GET would get


def test_bytes_that_are_not_http_after_a_request_are_refused_after_its_reply(
    server: tuple[Served, ErrorLog],
) -> None:
    health = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
    assert check_replies(exchange(server[0], health + b"\x16\x03\x01 not http\r\n\r\n")) == [
        200,
        400,
    ]


def test_bytes_that_stop_before_a_request_target_get_the_body(
    server: tuple[Served, ErrorLog],
) -> None:
    # ``HEAD`` alone, then silence: the head times out (408) before any request was made,
    # so the reply is not a HEAD reply (CI's fuzzing shrank a failure to this example)
    received = exchange(server[0], b"HEAD", CLOSE_S)
    assert check_replies(received) == [408]
