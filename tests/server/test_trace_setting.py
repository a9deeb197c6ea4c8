"""Trace-setting updates read from HTTP JSON and gRPC values, as Triton's handlers read them."""

from __future__ import annotations

from typing import Any

import pytest

from workbench.core.trace import TraceLevel
from workbench.core.trace_settings import NewSetting, TraceManager, TraceOptions
from workbench.errors import InternalError, InvalidArgumentError, UnsupportedError
from workbench.server.trace_setting import (
    check_model,
    grpc_new_setting,
    http_answer,
    http_new_setting,
    setting_values,
)

ALL = frozenset({"level", "rate", "count", "log_frequency"})


@pytest.mark.parametrize(
    ("body", "new"),
    [
        ({}, NewSetting()),
        ([1], NewSetting()),  # not an object: nothing to find in it
        ({"trace_level": ["TIMESTAMPS", "BOGUS", "TENSORS"]},
         NewSetting(level=TraceLevel.TIMESTAMPS | TraceLevel.TENSORS)),
        ({"trace_level": ["BOGUS"]}, NewSetting()),
        ({"trace_level": []}, NewSetting()),
        ({"trace_level": ["OFF"]}, NewSetting(level=TraceLevel.OFF)),
        ({"trace_rate": " +12abc"}, NewSetting(rate=12)),
        ({"trace_rate": "-1", "log_frequency": "-2"},
         NewSetting(rate=4294967295, log_frequency=4294967294)),
        ({"trace_count": "-1"}, NewSetting(count=-1)),
        (dict.fromkeys(("trace_level", "trace_rate", "trace_count", "log_frequency")),
         NewSetting(clear=ALL)),
        ({"unknown": 1, "trace_mode": "opentelemetry"}, NewSetting()),
    ],
)  # fmt: skip
def test_http_bodies(body: Any, new: NewSetting) -> None:
    assert http_new_setting(body) == new


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ({"trace_file": None}, UnsupportedError,
         "trace file location can not be updated through network protocol"),
        ({"trace_level": "TIMESTAMPS"}, InternalError, "attempt to access JSON non-array as array"),
        ({"trace_level": ["OFF", 1]}, InvalidArgumentError,
         "Expect only one trace level 'OFF' is specified"),
        ({"trace_level": [1, "OFF"]}, InternalError, "attempt to access JSON non-string as string"),
        ({"trace_rate": 5}, InternalError, "attempt to access JSON non-string as string"),
        ({"trace_rate": "x5"}, InvalidArgumentError, "Unable to parse 'trace_rate', got: x5"),
        ({"trace_rate": "4294967296"}, InvalidArgumentError,
         "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: 4294967296"),
        ({"trace_count": "-2"}, InvalidArgumentError,
         "Unable to parse 'trace_count'. Expecting value >= -1, got:-2"),
        ({"trace_count": "3000000000"}, InvalidArgumentError,
         "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ], got: "
         "3000000000"),
    ],
)  # fmt: skip
def test_http_errors(body: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as refused:
        http_new_setting(body)
    assert str(refused.value) == message


def test_grpc_values_clear_with_an_empty_list_and_take_one_value() -> None:
    assert grpc_new_setting({}) is None
    assert grpc_new_setting({"trace_level": [], "trace_count": ["3"]}) == NewSetting(
        count=3, clear=frozenset({"level"})
    )
    with pytest.raises(InvalidArgumentError, match="^expect only 1 value for 'trace_rate'$"):
        grpc_new_setting({"trace_rate": ["1", "2"]})
    with pytest.raises(InvalidArgumentError) as refused:
        grpc_new_setting({"trace_count": ["-5"]})
    assert str(refused.value) == "Unable to parse 'trace_count'. Expecting value >= -1, got: -5"


def test_answers_list_the_setting_in_tritons_order() -> None:
    tracer = TraceManager(TraceOptions(file="/tmp/t.json"))
    assert list(setting_values(tracer)) == [
        "trace_level", "trace_rate", "trace_count", "log_frequency", "trace_file", "trace_mode",
    ]  # fmt: skip
    assert http_answer(tracer) == {
        "trace_level": ["OFF"],
        "trace_rate": "1000",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": "/tmp/t.json",
        "trace_mode": "triton",
    }


def test_a_model_setting_needs_a_ready_model() -> None:
    check_model("", lambda name: False)
    with pytest.raises(InvalidArgumentError, match="^Request for unknown model : nope$"):
        check_model("nope", lambda name: False)
