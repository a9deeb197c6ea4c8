"""Request parameters and version strings of the gRPC protocol, checked as Triton checks them.

Mirrors ``SetInferenceRequestMetadata`` and ``SetStateParameterFromTritonParameter``
(``src/grpc/infer_handler.cc``) and ``GetModelVersionFromString`` (``src/common.cc``) of
Triton 2.51: each reserved key has one accepted ``InferParameter`` type, other keys may be
int64, bool, string or double, and every mismatch is an ``INVALID_ARGUMENT`` with Triton's text.
The parameters reach the core as the same plain dict the HTTP side builds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc.service_pb2 import InferParameter

from workbench._types import Parameters
from workbench.errors import InvalidArgumentError

#: ``std::stol``: optional leading blanks and sign, then digits; the rest is ignored.
_STOL = re.compile(r"\s*([+-]?\d+)")
_INT64_MAX = 2**63 - 1
#: The one ``triton_``-prefixed request parameter Triton 2.51 accepts.
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"
_CUSTOM_TYPES = ("int64_param", "bool_param", "string_param", "double_param")


def model_version(text: str) -> str:
    """A request's ``model_version`` as the core takes it ("" = chosen by the version policy)."""
    if not text:
        return ""
    match = _STOL.match(text)
    if match is None or abs(int(match[1])) > _INT64_MAX:
        raise InvalidArgumentError(
            f"failed to get model version from specified version string '{text}' "
            "(details: stol), version should be an integral value > 0"
        )
    version = int(match[1])
    if version < 0:
        raise InvalidArgumentError(
            f"invalid model version specified '{text}' , version should be an integral value > 0"
        )
    return str(version)


@dataclass(slots=True)
class RequestParameters:
    """What a request's ``parameters`` map stands for."""

    #: for the core: sequence controls, priority, timeout and the model's own parameters
    values: Parameters
    #: ``triton_enable_empty_final_response``: send a decoupled model's bare final flag
    empty_final_response: bool = False


def request_parameters(params: Mapping[str, InferParameter]) -> RequestParameters:
    """Check and convert a ``ModelInferRequest.parameters`` map."""
    result = RequestParameters({})
    for key, param in params.items():
        kind = param.WhichOneof("parameter_choice")
        if key == EMPTY_FINAL_RESPONSE:
            result.empty_final_response = _expect(key, param, kind, "bool_param")
        elif key.startswith("triton_"):
            raise InvalidArgumentError(
                "parameter keys starting with 'triton_' are reserved for Triton usage. Only the "
                f"following keys starting with 'triton_' are allowed: {EMPTY_FINAL_RESPONSE}"
            )
        else:
            result.values[key] = _value(key, param, kind)
    return result


def _value(key: str, param: InferParameter, kind: str | None) -> Any:
    if key == "sequence_id":
        return _one_of(key, param, kind, ("int64_param", "string_param"))
    if key in ("sequence_start", "sequence_end"):
        return _expect(key, param, kind, "bool_param")
    if key == "priority":
        value = _one_of(key, param, kind, ("int64_param", "uint64_param"))
        if value < 0:
            raise InvalidArgumentError("invalid value for 'priority', expected value >= 0.")
        return value
    if key == "timeout":
        return _expect(key, param, kind, "int64_param")
    if kind not in _CUSTOM_TYPES:
        raise InvalidArgumentError(
            f"invalid value type for '{key}' parameter, expected "
            "int64_param, bool_param, or string_param."
        )
    return getattr(param, kind)


def _expect(key: str, param: InferParameter, kind: str | None, expected: str) -> Any:
    if kind != expected:
        raise InvalidArgumentError(
            f"invalid value type for '{key}' parameter, expected {expected}."
        )
    return getattr(param, expected)


def _one_of(key: str, param: InferParameter, kind: str | None, accepted: tuple[str, str]) -> Any:
    if kind not in accepted:
        raise InvalidArgumentError(
            f"invalid value type for '{key}' parameter, expected {accepted[0]} or {accepted[1]}."
        )
    return getattr(param, kind)


def to_infer_parameter(value: Any) -> InferParameter:
    """A response parameter (bool, int, float or str) as an ``InferParameter``."""
    if isinstance(value, bool):
        return InferParameter(bool_param=value)
    if isinstance(value, int):
        return InferParameter(int64_param=value)
    if isinstance(value, float):
        return InferParameter(double_param=value)
    return InferParameter(string_param=str(value))


__all__ = [
    "EMPTY_FINAL_RESPONSE",
    "RequestParameters",
    "model_version",
    "request_parameters",
    "to_infer_parameter",
]
