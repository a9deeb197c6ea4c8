"""The trace extension's settings over HTTP and gRPC: parse an update, answer the setting.

Mirrors ``HTTPAPIServer::HandleTrace`` (``src/http_server.cc``) and ``RegisterTrace``
(``src/grpc/grpc_server.cc``) of Triton 2.51, texts included. Values travel as strings and
are read with ``std::stoi``: leading blanks and a sign are accepted, anything after the
digits is ignored ("12abc" is 12), a value outside ``int32`` is out of range, and a negative
rate or log frequency wraps around as Triton stores it (``uint32``: "-1" is 4294967295).
A model's setting can only be asked for while some version of it is ready. Every text is
listed in ``docs/triton-trace-facts.md``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workbench.core.trace import TraceLevel
from workbench.core.trace_settings import MIN_TRACE_COUNT, TRITON_MODE, NewSetting, TraceManager
from workbench.errors import InternalError, InvalidArgumentError, UnsupportedError

_INT32 = (-(1 << 31), (1 << 31) - 1)
_UINT32_MAX = (1 << 32) - 1
#: what ``std::stoi`` reads: C ``isspace`` blanks, a sign, decimal digits
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
#: setting -> the range Triton's out-of-range message names
_RANGES = {
    "trace_rate": (0, _UINT32_MAX),
    "trace_count": (MIN_TRACE_COUNT, _INT32[1]),
    "log_frequency": (0, _UINT32_MAX),
}
#: the request's names of the numeric fields -> ``NewSetting``'s
_NUMBERS = {"trace_rate": "rate", "trace_count": "count", "log_frequency": "log_frequency"}
_NO_FILE = "trace file location can not be updated through network protocol"
_JSON_STRING = "attempt to access JSON non-string as string"


def check_model(model: str, is_ready: Callable[[str], bool]) -> None:
    """Triton's refusal of a model setting for a model with no ready version."""
    if model and not is_ready(model):
        raise InvalidArgumentError(f"Request for unknown model : {model}")


def setting_values(tracer: TraceManager, model: str = "") -> dict[str, list[str]]:
    """The setting ``model`` is traced under, each value a list of strings, in Triton's order
    (``log_frequency`` and ``trace_file`` only in ``triton`` mode), then the mode's
    ``--trace-config`` entries (``url``, ``resource``, ``bsp_*`` ...; a repeated one has
    several values)."""
    setting = tracer.setting(model)
    values = {
        "trace_level": setting.level.names(),
        "trace_rate": [str(setting.rate)],
        "trace_count": [str(setting.count)],
    }
    if setting.mode == TRITON_MODE:
        values["log_frequency"] = [str(setting.log_frequency)]
        values["trace_file"] = [setting.file.name]
    values["trace_mode"] = [setting.mode]
    for name, value in setting.config:
        values.setdefault(name, []).append(value)
    return values


def http_answer(tracer: TraceManager, model: str = "") -> dict[str, Any]:
    """The JSON object of ``GET /v2[/models/<m>]/trace/setting``: the level a list, the rest
    strings. Triton repeats the key of a repeated entry (``"resource"`` twice); JSON readers
    keep the last one, which is the one answered here."""
    return {
        name: value if name == "trace_level" else value[-1]
        for name, value in setting_values(tracer, model).items()
    }


# -- HTTP: a JSON object; ``null`` clears a field ---------------------------------------------
def http_new_setting(body: Any) -> NewSetting:
    """The update a ``POST`` body asks for (a body that is not an object asks for nothing)."""
    if not isinstance(body, dict):
        return NewSetting()
    if "trace_file" in body:
        raise UnsupportedError(_NO_FILE)
    fields: dict[str, Any] = {}
    clear: set[str] = set()
    if "trace_level" in body:
        if body["trace_level"] is None:
            clear.add("level")
        else:
            _set(fields, "level", _levels(_json_array(body["trace_level"])))
    for name, field in _NUMBERS.items():
        if name not in body:
            continue
        if body[name] is None:
            clear.add(field)
        elif not isinstance(body[name], str):
            raise InternalError(_JSON_STRING)
        else:
            fields[field] = _number(name, body[name], http=True)
    return NewSetting(clear=frozenset(clear), **fields)


def _json_array(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise InternalError("attempt to access JSON non-array as array")
    return value


# -- gRPC: each value a list of strings; an empty list clears --------------------------------
def grpc_new_setting(settings: Mapping[str, Sequence[str]]) -> NewSetting | None:
    """The update a ``TraceSettingRequest`` asks for; None when it carries no settings."""
    if not settings:
        return None
    if "trace_file" in settings:
        raise UnsupportedError(_NO_FILE)
    fields: dict[str, Any] = {}
    clear: set[str] = set()
    if "trace_level" in settings:
        if not settings["trace_level"]:
            clear.add("level")
        else:
            _set(fields, "level", _levels(list(settings["trace_level"])))
    for name, field in _NUMBERS.items():
        values = settings.get(name)
        if values is None:
            continue
        if not values:
            clear.add(field)
        elif len(values) > 1:
            raise InvalidArgumentError(f"expect only 1 value for '{name}'")
        else:
            fields[field] = _number(name, values[0], http=False)
    return NewSetting(clear=frozenset(clear), **fields)


# -- values ------------------------------------------------------------------------------------
def _set(fields: dict[str, Any], name: str, value: Any) -> None:
    if value is not None:
        fields[name] = value


def _levels(names: list[Any]) -> TraceLevel | None:
    """The level a list of names asks for; None when it names no level Triton knows."""
    level: TraceLevel | None = None
    for name in names:
        if not isinstance(name, str):
            raise InternalError(_JSON_STRING)
        if name == "OFF":
            if len(names) != 1:
                raise InvalidArgumentError("Expect only one trace level 'OFF' is specified")
            level = TraceLevel.OFF
        elif name in ("TIMESTAMPS", "TENSORS"):
            level = (level or TraceLevel.OFF) | TraceLevel[name]
    return level


def _number(name: str, text: str, *, http: bool) -> int:
    """A setting's value as ``std::stoi`` reads it, stored as Triton stores it."""
    match = _STOI.match(text)
    if match is None:
        raise InvalidArgumentError(f"Unable to parse '{name}', got: {text}")
    value = int(match[1])
    if not _INT32[0] <= value <= _INT32[1]:
        low, high = _RANGES[name]
        raise InvalidArgumentError(
            f"Unable to parse '{name}', value is out of range [ {low}, {high} ], got: {text}"
        )
    if name != "trace_count":
        return value & _UINT32_MAX
    if value < MIN_TRACE_COUNT:
        gap = "" if http else " "  # (sic): the HTTP text has no space after the colon
        raise InvalidArgumentError(
            f"Unable to parse '{name}'. Expecting value >= {MIN_TRACE_COUNT}, got:{gap}{text}"
        )
    return value


__all__ = [
    "check_model",
    "grpc_new_setting",
    "http_answer",
    "http_new_setting",
    "setting_values",
]
