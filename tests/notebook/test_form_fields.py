"""Form fields over a ModelConfig: reading never changes it, writing goes through protobuf."""

from __future__ import annotations

import pytest
from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from workbench.config import parse_pbtxt, to_pbtxt
from workbench.errors import InvalidArgumentError
from workbench.notebook.form_fields import (
    FIELDS,
    field_for_problem,
    get_value,
    read_form,
    set_value,
)

BASE = """
name: "m"
backend: "python"
max_batch_size: 8
instance_group [ { name: "g0" count: 2 kind: KIND_CPU } ]
"""


def test_reading_the_form_leaves_the_config_unchanged() -> None:
    config = parse_pbtxt(BASE)
    before = to_pbtxt(config)
    form = read_form(config)
    assert to_pbtxt(config) == before
    assert set(form) == {field.path for field in FIELDS}
    assert form["max_batch_size"] == 8
    assert form["dynamic_batching"] is False
    assert form["dynamic_batching.max_queue_delay_microseconds"] == 0
    assert form["dynamic_batching.default_queue_policy.timeout_action"] == "REJECT"
    assert form["version_policy"] == "latest"
    assert form["version_policy.latest.num_versions"] == 1
    assert form["instance_group"] == [{"count": 2, "kind": "KIND_CPU", "gpus": []}]


def test_dynamic_batching_fields() -> None:
    config = parse_pbtxt(BASE)
    set_value(config, "dynamic_batching", True)
    assert config.HasField("dynamic_batching")
    set_value(config, "dynamic_batching.preferred_batch_size", "2, 4")
    set_value(config, "dynamic_batching.max_queue_delay_microseconds", "500")
    set_value(config, "dynamic_batching.default_queue_policy.timeout_action", "DELAY")
    set_value(config, "dynamic_batching.priority_levels", 2)
    batching = config.dynamic_batching
    assert list(batching.preferred_batch_size) == [2, 4]
    assert batching.max_queue_delay_microseconds == 500
    assert batching.default_queue_policy.timeout_action == batching.default_queue_policy.DELAY
    assert batching.priority_levels == 2
    set_value(config, "dynamic_batching", False)
    assert not config.HasField("dynamic_batching")


def test_instance_rows_keep_other_group_fields() -> None:
    config = parse_pbtxt(BASE)
    rows = [{"count": 3, "kind": "KIND_CPU"}, {"count": 1, "kind": "KIND_GPU", "gpus": [0, 1]}]
    set_value(config, "instance_group", rows)
    assert [g.count for g in config.instance_group] == [3, 1]
    assert config.instance_group[0].name == "g0"
    assert config.instance_group[1].kind == ModelInstanceGroup.KIND_GPU
    assert list(config.instance_group[1].gpus) == [0, 1]
    set_value(config, "instance_group", rows[:1])
    assert len(config.instance_group) == 1


def test_version_policy_choice() -> None:
    config = parse_pbtxt(BASE)
    set_value(config, "version_policy", "latest")
    assert not config.HasField("version_policy")  # unchanged: latest is already the default
    set_value(config, "version_policy", "all")
    assert config.version_policy.WhichOneof("policy_choice") == "all"
    set_value(config, "version_policy.specific.versions", [1, 3])
    assert get_value(config, "version_policy") == "specific"
    assert get_value(config, "version_policy.specific.versions") == [1, 3]
    set_value(config, "version_policy.latest.num_versions", 2)
    assert get_value(config, "version_policy") == "latest"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("max_batch_size", "eight", "max_batch_size: expected a whole number"),
        ("max_batch_size", True, "expected a whole number"),
        ("dynamic_batching.max_queue_delay_microseconds", -1, "out of range"),
        ("dynamic_batching.preferred_batch_size", "4, x", "separated by commas"),
        ("dynamic_batching.default_queue_policy.timeout_action", "WAIT", "REJECT, DELAY"),
        ("response_cache.enable", "yes", "expected true or false"),
        ("instance_group", [{"count": 1, "kind": "KIND_TPU"}], r"instance_group\[0\].kind"),
        ("instance_group", [{"cores": 2}], "unknown keys"),
        ("instance_group", "KIND_CPU", "expected a list"),
        ("optimization", 1, "not a form field"),
    ],
)
def test_bad_values_name_the_field(path: str, value: object, message: str) -> None:
    config = parse_pbtxt(BASE)
    with pytest.raises(InvalidArgumentError, match=message):
        set_value(config, path, value)


def test_problems_land_next_to_their_field() -> None:
    assert field_for_problem("max_batch_size") == "max_batch_size"
    assert field_for_problem("instance_group[1].count") == "instance_group"
    assert field_for_problem("dynamic_batching.priority_queue_policy") == "dynamic_batching"
    assert field_for_problem("input[0].dims") == ""
