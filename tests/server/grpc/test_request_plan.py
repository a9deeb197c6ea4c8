"""The gRPC hot path's shortcuts give what protobuf and the full codec give, byte for byte.

``request_plan``: a message of a layout seen before gives what the full decoder gives;
``response_codec``'s remembered frames give the bytes protobuf would serialise.

The layouts, plans and frames must be invisible: the same request, the same parameters, the same
errors as protobuf's parse and ``request_codec`` would give, for every message; and for the
usual message (perf_analyzer's) neither a protobuf parse nor the full decoder runs again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from google.protobuf.message import DecodeError
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc import service_pb2 as pb

from workbench._types import Tensor
from workbench.core.request import InferRequest, InferResponse
from workbench.errors import InvalidArgumentError
from workbench.server.grpc import inference, raw_inputs
from workbench.server.grpc.inference import prepare, prepare_received
from workbench.server.grpc.parameters import RequestParameters
from workbench.server.grpc.raw_inputs import parse_infer_request
from workbench.server.grpc.request_plan import _REPLACE_AFTER, LAYOUTS
from workbench.server.grpc.response_codec import _FRAMES, encode_response, serialize_response_parts

P = pb.InferParameter
Input = pb.ModelInferRequest.InferInputTensor
Output = pb.ModelInferRequest.InferRequestedOutputTensor
CONFIG = text_format.Parse('name: "m" max_batch_size: 8', model_config_pb2.ModelConfig())


@pytest.fixture(autouse=True)
def no_layouts() -> Iterator[None]:
    LAYOUTS.by_size.clear()
    yield
    LAYOUTS.by_size.clear()


def perf_analyzer(values: np.ndarray) -> pb.ModelInferRequest:
    return pb.ModelInferRequest(
        model_name="add_one",
        inputs=[Input(name="INPUT0", datatype="FP32", shape=[1, 16])],
        outputs=[Output(name="OUTPUT0")],
        raw_input_contents=[values.astype(np.float32).tobytes()],
    )


def several(seed: int) -> pb.ModelInferRequest:
    rng = np.random.default_rng(seed)
    arrays = [
        ("A", "INT64", rng.integers(0, 99, (2, 3)).astype(np.int64)),
        ("B", "BOOL", rng.integers(0, 2, (2, 2)).astype(np.bool_)),
        ("C", "FP16", rng.random((2, 4)).astype(np.float16)),
        ("D", "INT32", np.zeros((0, 4), np.int32)),
    ]
    message = pb.ModelInferRequest(
        model_name="m",
        model_version="2",
        id="r-7",
        inputs=[Input(name=n, datatype=t, shape=list(a.shape)) for n, t, a in arrays],
        outputs=[
            Output(name="Y", parameters={"classification": P(int64_param=2)}),
            Output(name="X"),
        ],
        raw_input_contents=[a.tobytes() for _, _, a in arrays],
    )
    for key, value in {
        "priority": P(uint64_param=2),
        "sequence_id": P(string_param="s"),
        "custom": P(double_param=0.5),
        "triton_enable_empty_final_response": P(bool_param=True),
    }.items():
        message.parameters[key].CopyFrom(value)
    return message


def no_outputs(seed: int) -> pb.ModelInferRequest:
    message = perf_analyzer(np.full(16, seed))
    del message.outputs[:]
    return message


USUAL = {
    "perf_analyzer": lambda seed: perf_analyzer(np.arange(16) + seed),
    "several inputs, parameters, classification": several,
    "no outputs listed": no_outputs,
}


def full(data: bytes, version: str) -> tuple[InferRequest, RequestParameters]:
    """protobuf's parse and the full decoder, no layout."""
    message = pb.ModelInferRequest.FromString(data)
    prepared = prepare(message, version, CONFIG)
    return prepared.request, prepared.parameters


def summary(request: InferRequest, parameters: RequestParameters) -> dict[str, Any]:
    inputs = {
        name: (t.name, t.datatype, t.array.dtype, t.array.shape, t.array.tolist(), t.parameters)
        for name, t in request.inputs.items()
    }
    deferred = {
        name: (d.shape, d.byte_size, str(d.error))
        for name, d in (request.deferred_inputs or {}).items()
    }
    fields = (request.model_name, request.model_version, request.id, request.parameters)
    return {
        "fields": fields,
        "inputs": inputs,
        "outputs": (request.requested_outputs, request.output_parameters),
        "parameters": (parameters.values, parameters.empty_final_response),
        "rest": (deferred, request.shared_memory),
    }


def received(data: bytes, version: str) -> tuple[InferRequest, RequestParameters]:
    prepared = prepare_received(parse_infer_request(data), version, CONFIG)
    return prepared.request, prepared.parameters


@pytest.mark.parametrize("make", USUAL.values(), ids=USUAL.keys())
def test_a_message_of_a_known_layout_decodes_as_the_full_decoder(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = make(1).SerializeToString(), make(2).SerializeToString()
    assert len(first) == len(second) and first != second
    version = "2"
    assert summary(*received(first, version)) == summary(*full(first, version))
    expected = summary(*full(second, version))
    # the second is neither parsed by protobuf nor walked by the full decoder
    for module, name in [(raw_inputs, "ModelInferRequest"), (inference, "decode_request")]:
        monkeypatch.setattr(module, name, None)
    request, parameters = received(second, version)
    assert summary(request, parameters) == expected
    for tensor in request.inputs.values():  # views of the received bytes, read only
        assert tensor.array.base is second and not tensor.array.flags.writeable


def test_a_plan_hands_out_its_own_dicts_each_time() -> None:
    data = several(1).SerializeToString()
    received(data, "2")
    request, parameters = received(data, "2")
    request.parameters["added"] = 1
    request.output_parameters["Y"]["classification"] = 9
    assert request.requested_outputs is not None
    request.requested_outputs.append("Z")
    again, _ = received(data, "2")
    assert "added" not in again.parameters and parameters.values is request.parameters
    assert again.output_parameters == {"Y": {"classification": 2}}
    assert again.requested_outputs == ["Y", "X"]


def test_the_same_bytes_resolved_to_another_version_are_not_given_the_old_plan() -> None:
    # A message without a version follows the model's versions: once version 3 is loaded
    # beside 2 (latest policy), the same bytes are a request for 3, not a replay of the plan
    # made while 2 was the latest.
    data = perf_analyzer(np.arange(16)).SerializeToString()
    received(data, "2")
    assert received(data, "2")[0].model_version == "2"  # the plan's
    request, parameters = received(data, "3")
    assert request.model_version == "3"
    assert summary(request, parameters) == summary(*full(data, "3"))


def test_a_message_that_differs_outside_its_tensors_is_decoded_as_itself() -> None:
    one = perf_analyzer(np.zeros(16))
    one.id = "a1"
    other = perf_analyzer(np.ones(16))
    other.id = "a2"
    received(one.SerializeToString(), "")
    request, _ = received(other.SerializeToString(), "")
    assert request.id == "a2"
    np.testing.assert_array_equal(request.inputs["INPUT0"].array, np.ones((1, 16)))


NOT_PLAIN = {
    "typed contents beside raw": lambda: pb.ModelInferRequest(
        model_name="m",
        inputs=[
            Input(name="T", datatype="INT32", shape=[2], contents={"int_contents": [1, 2]}),
            Input(name="R", datatype="INT32", shape=[2]),
        ],
        raw_input_contents=[np.arange(2, dtype=np.int32).tobytes()],
    ),
    "input named twice": lambda: pb.ModelInferRequest(
        model_name="m",
        inputs=[Input(name="R", datatype="INT8", shape=[1])] * 2,
        raw_input_contents=[b"\x01", b"\x02"],
    ),
    "byte size that does not fit the shape": lambda: pb.ModelInferRequest(
        model_name="m",
        inputs=[Input(name="R", datatype="FP32", shape=[1, 15])],
        raw_input_contents=[bytes(64)],
    ),
    "BYTES": lambda: pb.ModelInferRequest(
        model_name="m",
        inputs=[Input(name="S", datatype="BYTES", shape=[1])],
        raw_input_contents=[b"\x03\x00\x00\x00abc"],
    ),
}


@pytest.mark.parametrize("make", NOT_PLAIN.values(), ids=NOT_PLAIN.keys())
def test_a_message_that_is_not_plain_gets_no_plan_and_the_full_decoder_each_time(
    make: Any,
) -> None:
    data = make().SerializeToString()
    outcomes = []
    for _ in range(2):
        try:
            outcomes.append(summary(*received(data, "")))
        except InvalidArgumentError as exc:
            outcomes.append(str(exc))
        layout = LAYOUTS.find(data)
        assert layout is not None and layout.plan is None
    try:
        expected: Any = summary(*full(data, ""))
    except InvalidArgumentError as exc:
        expected = str(exc)
    assert outcomes == [expected, expected]


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The messages ``raw_inputs`` walks from now on (its ``_split`` counted)."""
    walked: list[bytes] = []
    real_split = raw_inputs._split

    def counted(data: bytes) -> Any:
        walked.append(data)
        return real_split(data)

    monkeypatch.setattr(raw_inputs, "_split", counted)
    return walked


def test_messages_that_never_repeat_are_walked_once_in_a_while(walks: list[bytes]) -> None:
    count = 3 * (_REPLACE_AFTER + 1)
    for index in range(count):
        message = perf_analyzer(np.zeros(16))
        message.id = f"{index:04d}"  # same length, never the same message
        request, _ = received(message.SerializeToString(), "")
        assert request.id == f"{index:04d}"
    assert len(walks) == 3  # the first, then once each time the layout had missed enough


def test_a_shared_buffer_gets_no_layout() -> None:
    data = memoryview(bytearray(perf_analyzer(np.arange(16)).SerializeToString()))
    prepared = prepare_received(parse_infer_request(data), "", CONFIG)  # type: ignore[arg-type]
    np.testing.assert_array_equal(prepared.request.inputs["INPUT0"].array, [np.arange(16)])
    assert LAYOUTS.by_size == {}


RESPONSES = {
    "one output": [("OUTPUT0", "FP32", np.arange(16, dtype=np.float32).reshape(1, 16))],
    "several, BYTES among them": [
        ("S", "BYTES", np.array([b"ab", b"cde"], dtype=np.object_)),
        ("I", "INT64", np.arange(6, dtype=np.int64).reshape(2, 3)),
        ("E", "INT32", np.zeros((0, 2), np.int32)),
    ],
    "none": [],
}


@pytest.mark.parametrize("outputs", RESPONSES.values(), ids=RESPONSES.keys())
@pytest.mark.parametrize("response_id", ["", "r-1"])
def test_a_remembered_response_frame_gives_protobufs_bytes(
    outputs: list[tuple[str, str, np.ndarray]], response_id: str
) -> None:
    def response(shift: int, **fields: Any) -> InferResponse:
        tensors = [
            Tensor(n, t, a if t == "BYTES" else a + shift)  # other values, same lengths
            for n, t, a in outputs
        ]
        return InferResponse("m", "3", response_id, tensors, **fields)

    def protobuf(reply: InferResponse, *args: Any) -> bytes:
        return encode_response(reply, *args).SerializeToString()

    def ours(reply: InferResponse, *args: Any) -> bytes:
        parts = serialize_response_parts(reply, *args)
        return parts if isinstance(parts, bytes) else b"".join(parts)

    _FRAMES.clear()
    for shift in (0, 1, 2):  # made, then remembered twice
        assert ours(response(shift)) == protobuf(response(shift))
    assert len(_FRAMES) == 1
    with_parameters = response(0, parameters={"p": 1})  # not remembered
    assert ours(with_parameters) == protobuf(with_parameters)
    if outputs:
        asked = InferRequest("m", requested_outputs=[outputs[-1][0]])
        in_region = {outputs[0][0]}
        for args in [(asked,), (None, 2**31 - 1, in_region)]:
            assert ours(response(1), *args) == protobuf(response(1), *args)
    longer = [Tensor("S", "BYTES", np.array([b"abcd", b"cde"], dtype=np.object_))]
    reply = InferResponse("m", "3", response_id, longer)  # same shape, other length
    assert ours(reply) == protobuf(reply)


def test_a_key_longer_than_protobuf_reads_is_refused_as_protobuf_refuses_it() -> None:
    head = pb.ModelInferRequest(
        model_name="m", inputs=[Input(name="X", datatype="FP32", shape=[1])]
    ).SerializeToString()
    for padding in (0, 70_000):  # small (walked for a layout) and large (walked to cut)
        long_key = b"\xba\x80\x80\x80\x80\x00"  # raw_input_contents' key in six bytes
        data = head + long_key + b"\x04abcd" + (b"\x3a\x00" * padding)
        with pytest.raises(DecodeError):
            pb.ModelInferRequest.FromString(data)
        with pytest.raises(DecodeError):
            parse_infer_request(data)
    five = head + b"\xba\x80\x80\x80\x00" + b"\x04abcd"  # five bytes: protobuf reads it
    assert list(pb.ModelInferRequest.FromString(five).raw_input_contents) == [b"abcd"]
    assert [bytes(v) for v in parse_infer_request(five).raw] == [b"abcd"]


def test_a_message_without_raw_contents_is_not_parsed_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make = NOT_PLAIN["typed contents beside raw"]
    message = make()
    del message.raw_input_contents[:]
    del message.inputs[1:]
    data = message.SerializeToString()
    expected = summary(*full(data, ""))
    assert summary(*received(data, "")) == expected
    monkeypatch.setattr(raw_inputs, "ModelInferRequest", None)
    assert summary(*received(data, "")) == expected


def test_a_message_with_much_outside_its_tensors_gets_no_layout(walks: list[bytes]) -> None:
    for index in range(2 * (_REPLACE_AFTER + 1)):
        message = perf_analyzer(np.full(16, index))
        message.id = "i" * 5000
        request, _ = received(message.SerializeToString(), "")
        assert request.id == "i" * 5000
        assert request.inputs["INPUT0"].array[0, 0] == index
    assert LAYOUTS.by_size == {} and len(walks) == 2


def test_a_response_without_outputs_is_still_held_to_the_size_limit() -> None:
    reply = InferResponse("m", "3", "x" * 100, [])
    with pytest.raises(InvalidArgumentError, match="exceeds gRPC's byte size limit 50"):
        serialize_response_parts(reply, None, 50)
