"""Writing a changed config over the user's text keeps comments and layout where it can."""

from __future__ import annotations

import pytest

from workbench.config import parse_pbtxt, pbtxt_patch, to_pbtxt
from workbench.config.pbtxt_patch import patch_pbtxt

HAND_WRITTEN = """\
# linear model, tuned by hand
name: "linear"   # must match the folder
platform: "onnxruntime_onnx"
max_batch_size: 8  # measured on the 2-core box
input [
  # four features
  { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def test_an_unchanged_config_keeps_the_text_byte_for_byte() -> None:
    patched = patch_pbtxt(HAND_WRITTEN, parse_pbtxt(HAND_WRITTEN))
    assert patched.text == HAND_WRITTEN
    assert (patched.rewritten, patched.lost_comments, patched.canonical) == ((), (), False)


def test_a_changed_field_is_rewritten_alone_and_comments_elsewhere_stay() -> None:
    config = parse_pbtxt(HAND_WRITTEN)
    config.max_batch_size = 4
    config.dynamic_batching.preferred_batch_size.append(2)
    patched = patch_pbtxt(HAND_WRITTEN, config)
    assert patched.text == HAND_WRITTEN.replace("max_batch_size: 8", "max_batch_size: 4").replace(
        "dynamic_batching { max_queue_delay_microseconds: 100 }",
        "dynamic_batching {\n  preferred_batch_size: 2\n  max_queue_delay_microseconds: 100\n}",
    )
    assert patched.rewritten == ("max_batch_size", "dynamic_batching")
    assert patched.lost_comments == () and not patched.canonical
    assert parse_pbtxt(patched.text) == config


def test_comments_inside_a_rewritten_field_are_named() -> None:
    config = parse_pbtxt(HAND_WRITTEN)
    config.input[0].dims[0] = 2
    patched = patch_pbtxt(HAND_WRITTEN, config)
    assert patched.lost_comments == ("# four features",)
    assert "# must match the folder" in patched.text and "dims: 2" in patched.text


def test_removed_fields_are_cut_and_new_ones_appended() -> None:
    config = parse_pbtxt(HAND_WRITTEN)
    config.ClearField("instance_group")
    config.response_cache.enable = True
    patched = patch_pbtxt(HAND_WRITTEN, config)
    assert "instance_group" not in patched.text
    assert patched.text.endswith(
        "dynamic_batching { max_queue_delay_microseconds: 100 }\nresponse_cache {\n"
        "  enable: true\n}\n"
    )
    assert parse_pbtxt(patched.text) == config


def test_a_field_written_twice_becomes_one() -> None:
    text = 'name: "m"\ninput { name: "A" }\nmax_batch_size: 2\ninput { name: "B" }\n'
    config = parse_pbtxt(text)
    config.input[1].name = "C"
    patched = patch_pbtxt(text, config)
    assert patched.text == (
        'name: "m"\ninput {\n  name: "A"\n}\ninput {\n  name: "C"\n}\nmax_batch_size: 2\n'
    )


def test_text_the_splitter_cannot_follow_is_written_canonically(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pbtxt_patch, "_spans", lambda _text: None)
    config = parse_pbtxt(HAND_WRITTEN)
    config.max_batch_size = 4
    patched = patch_pbtxt(HAND_WRITTEN, config)
    assert patched.canonical and patched.text == to_pbtxt(config)
    assert set(patched.lost_comments) == {
        "# linear model, tuned by hand",
        "# must match the folder",
        "# measured on the 2-core box",
        "# four features",
    }


@pytest.mark.parametrize(
    "text",
    [
        'name: "a" "b"  max_batch_size: 1',  # adjacent strings, two fields on a line
        'dynamic_batching: < max_queue_delay_microseconds: 5 >; name: "x",',  # <>, separators
        'parameters { key: "k" value { string_value: "{not a brace # nor a comment" } }',
        "",
    ],
)
def test_unusual_but_valid_layouts_round_trip(text: str) -> None:
    config = parse_pbtxt(text)
    assert patch_pbtxt(text, config).text == text
    config.max_batch_size = 7
    patched = patch_pbtxt(text, config)
    assert not patched.canonical and parse_pbtxt(patched.text) == config
