"""``raw_inputs.parse_infer_request``: protobuf's message, its raw inputs left in place."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.protobuf.message import DecodeError
from tritonclient.grpc.service_pb2 import ModelInferRequest

from workbench.server.grpc.raw_inputs import parse_infer_request
from workbench.server.grpc.request_plan import LAYOUTS


@pytest.fixture(autouse=True)
def no_layouts() -> Iterator[None]:
    LAYOUTS.by_size.clear()
    yield
    LAYOUTS.by_size.clear()


def _message(*raw: bytes) -> ModelInferRequest:
    message = ModelInferRequest(model_name="m", model_version="1", id="x")
    message.parameters["p"].int64_param = 3
    for index, _ in enumerate(raw):
        message.inputs.add(name=f"IN{index}", datatype="UINT8", shape=[len(raw[index])])
    message.outputs.add(name="OUT")
    message.raw_input_contents.extend(raw)
    return message


def test_a_large_message_keeps_its_raw_inputs_in_the_received_bytes() -> None:
    raw = [bytes(range(256)) * 400, b"", b"\x01" * 70_000]
    data = _message(*raw).SerializeToString()
    received = parse_infer_request(data)
    assert [bytes(view) for view in received.raw] == raw
    assert all(isinstance(view, memoryview) and view.obj is data for view in received.raw)
    expected = _message(*raw)
    del expected.raw_input_contents[:]
    assert received.message == expected


def test_a_small_message_is_split_for_its_layout_then_parsed_whole() -> None:
    data = _message(b"abc").SerializeToString()
    received = parse_infer_request(data)  # the first of its length: walked for its layout
    expected = ModelInferRequest.FromString(data)
    assert [bytes(view) for view in received.raw] == [b"abc"]
    assert received.layout is not None
    del expected.raw_input_contents[:]
    assert received.message == expected
    other = _message(b"xyz")
    other.id = "y"  # same length, another layout: that length's layout stays, this is parsed
    received = parse_infer_request(other.SerializeToString())
    assert received.message == other and list(received.raw) == [b"xyz"]
    assert received.layout is None


@pytest.mark.parametrize("cut", [1, 5, 100, 70_000, 102_420])
def test_a_cut_message_is_judged_by_protobuf(cut: int) -> None:
    data = _message(b"\x02" * 102_400, b"\x03" * 10).SerializeToString()[:-cut]
    try:
        expected = ModelInferRequest.FromString(data)
    except DecodeError:
        with pytest.raises(DecodeError):
            parse_infer_request(data)
        return
    received = parse_infer_request(data)
    assert [bytes(view) for view in received.raw] == list(expected.raw_input_contents)
