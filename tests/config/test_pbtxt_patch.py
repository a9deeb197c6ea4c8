"""Writing a changed config over the user's text keeps comments and layout where it can."""

from __future__ import annotations

import pytest

from workbench.config import parse_pbtxt, pbtxt_patch, to_pbtxt
from workbench.config.pbtxt_patch import field_line, patch_pbtxt

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


def test_a_block_left_with_only_defaults_is_written_on_one_line() -> None:
    config = parse_pbtxt(HAND_WRITTEN)
    config.dynamic_batching.max_queue_delay_microseconds = 0  # the best delay was none
    config.optimization.cuda.SetInParent()
    patched = patch_pbtxt(HAND_WRITTEN, config)
    assert "\ndynamic_batching { }\n" in patched.text
    assert patched.text.endswith("optimization {\n  cuda { }\n}\n")
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


NESTED = """\
name: "m"
input [
  { name: "A" dims: [ 4 ] },
  {
    name: "B"
    dims: [ 0 ]
  }
]
output { name: "C"
  dims: [ 3 ] }
dynamic_batching {
  priority_queue_policy {
    key: 2
    value { timeout_action: DELAY }
  }
}
"""


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ("name", 1),
        ("input[1].dims", 6),  # the second element of one ``input [...]`` list
        ("input[0].dims", 3),
        ("input[1]", 4),
        ("output[0].dims", 10),  # a block of its own
        ("dynamic_batching.priority_queue_policy[2]", 12),  # a map's entry, by its key
        ("dynamic_batching.priority_queue_policy[2].timeout_action", 14),
    ],
)
def test_a_problem_is_placed_on_the_line_of_its_innermost_field(field: str, line: int) -> None:
    assert field_line(NESTED, field) == line


@pytest.mark.parametrize(
    ("field", "line"),
    [
        ("input[1].data_type", 4),  # not written (a default): the element
        ("input[5].dims", 2),  # no such element: the field
        ("dynamic_batching.max_queue_delay_microseconds", 11),
        ("dynamic_batching.priority_queue_policy[7]", 12),
    ],
)
def test_an_unwritten_field_falls_back_to_the_enclosing_one(field: str, line: int) -> None:
    assert field_line(NESTED, field) == line


def test_no_line_for_a_missing_top_level_field_or_text_that_does_not_follow() -> None:
    assert field_line(NESTED, "max_batch_size") is None
    assert field_line('name: "m"\ninput [ { name: "A" ', "input[0].name") is None
