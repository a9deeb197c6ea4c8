"""``RequestChecker``: a decoding plan that passed a model's checks is not checked again."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import Tensor
from workbench.core.request import InferRequest
from workbench.core.request_checks import RequestChecker
from workbench.errors import InvalidArgumentError


def checker(dims: int) -> RequestChecker:
    config = text_format.Parse(
        f"""
        name: "m{dims}"
        max_batch_size: 8
        input [ {{ name: "X" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
        output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
        """,
        ModelConfig(),
    )
    return RequestChecker(config)


def request(plan: object | None, rows: int = 2, width: int = 4) -> InferRequest:
    x = np.zeros((rows, width), dtype=np.float32)
    return InferRequest("m", inputs={"X": Tensor("X", "FP32", x)}, id="r1", plan=plan)


def counted(target: RequestChecker) -> list[Any]:
    """Record each full check ``target`` makes."""
    calls: list[Any] = []
    full = target._check

    def check(req: InferRequest) -> int:
        calls.append(req)
        return full(req)

    target._check = check  # type: ignore[method-assign]
    return calls


def test_a_plan_that_passed_is_not_checked_again() -> None:
    model, plan = checker(4), object()
    calls = counted(model)
    assert [model.check(request(plan)) for _ in range(3)] == [2, 2, 2]
    assert len(calls) == 1


def test_requests_without_a_plan_are_checked_each_time() -> None:
    model = checker(4)
    calls = counted(model)
    assert [model.check(request(None)) for _ in range(3)] == [2, 2, 2]
    assert len(calls) == 3


def test_a_plan_that_failed_is_refused_each_time() -> None:
    model, plan = checker(4), object()
    calls = counted(model)
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match=r"\[request id: r1\] unexpected shape"):
            model.check(request(plan, width=5))
    assert len(calls) == 2


def test_each_model_checks_a_plan_for_itself() -> None:
    plan = object()
    assert checker(4).check(request(plan)) == 2
    with pytest.raises(InvalidArgumentError, match="unexpected shape"):
        checker(5).check(request(plan))
