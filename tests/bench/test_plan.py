"""The sweep grid and how a point changes a config, without a server."""

from __future__ import annotations

import pytest

from workbench.bench.plan import SweepPoint, apply_settings, plan_concurrency, plan_points
from workbench.config import parse_pbtxt
from workbench.errors import InvalidArgumentError

BASE = parse_pbtxt(
    'name: "m" backend: "onnxruntime" max_batch_size: 8 '
    'input { name: "X" data_type: TYPE_FP32 dims: [4] } '
    'output { name: "Y" data_type: TYPE_FP32 dims: [3] } '
    "instance_group { count: 1 kind: KIND_CPU } instance_group { count: 3 kind: KIND_CPU }"
)


def test_points_are_the_product_in_axis_order() -> None:
    points = plan_points(
        {"instance_count": [1, 2], "max_batch_size": [1, 8], "max_queue_delay_microseconds": None}
    )
    assert [p.as_dict() for p in points] == [
        {"max_batch_size": 1, "instance_count": 1},
        {"max_batch_size": 1, "instance_count": 2},
        {"max_batch_size": 8, "instance_count": 1},
        {"max_batch_size": 8, "instance_count": 2},
    ]
    assert points[1].label == "max_batch_size=1, instance_count=2"


def test_no_axes_is_one_point_measuring_the_model_as_is() -> None:
    assert plan_points({}) == [SweepPoint(())]
    assert plan_points({"max_batch_size": None})[0].label == "as is"


def test_a_single_value_is_an_axis_of_one() -> None:
    assert [p.as_dict() for p in plan_points({"max_batch_size": 4})] == [{"max_batch_size": 4}]


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ({"max_batch_sizes": [1]}, "unknown sweep setting(s) max_batch_sizes"),
        ({"instance_count": [0]}, "'instance_count': 0 is not an integer >= 1"),
        ({"max_batch_size": [-1]}, "'max_batch_size': -1 is not an integer >= 0"),
        ({"max_batch_size": [1.5]}, "1.5 is not an integer"),
        ({"max_batch_size": [True]}, "True is not an integer"),
        ({"max_batch_size": []}, "'max_batch_size' has no values"),
    ],
)
def test_bad_axes_are_refused_with_the_reason(axes: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        plan_points(axes)
    assert message in str(raised.value)


def test_concurrency_levels() -> None:
    assert plan_concurrency(4) == [4]
    assert plan_concurrency((1, 16)) == [1, 16]
    for bad in ([], [0], ["2"]):
        with pytest.raises(InvalidArgumentError):
            plan_concurrency(bad)


def test_settings_apply_to_a_copy() -> None:
    changed = apply_settings(
        BASE, {"max_batch_size": 32, "max_queue_delay_microseconds": 500, "instance_count": 2}
    )
    assert changed.max_batch_size == 32
    assert changed.HasField("dynamic_batching")
    assert changed.dynamic_batching.max_queue_delay_microseconds == 500
    assert [g.count for g in changed.instance_group] == [2, 2]
    assert BASE.max_batch_size == 8 and not BASE.HasField("dynamic_batching")
    assert [g.count for g in BASE.instance_group] == [1, 3]


def test_a_zero_delay_still_turns_dynamic_batching_on() -> None:
    changed = apply_settings(BASE, {"max_queue_delay_microseconds": 0})
    assert changed.HasField("dynamic_batching")


def test_instance_count_adds_a_group_when_there_is_none() -> None:
    bare = parse_pbtxt('name: "m" backend: "python"')
    changed = apply_settings(bare, {"instance_count": 3})
    assert len(changed.instance_group) == 1 and changed.instance_group[0].count == 3
