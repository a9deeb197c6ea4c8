"""``--trace-config`` flags as tritonserver 2.51 reads them (``src/command_line_parser.cc``).

``--trace-config <setting>=<value>`` sets a global setting: ``level`` (OFF, TIMESTAMPS or
TENSORS, case-insensitive, repeatable: the levels add up, and OFF anywhere turns tracing off),
``rate``, ``count`` and ``mode``. ``--trace-config triton,<setting>=<value>`` sets one of the
``triton`` mode: ``file`` and ``log-frequency``. Numbers are read as ``std::stoi`` reads them.
Errors carry Triton's texts (``Bad option: "--trace-config rate". ...``).

Only the ``triton`` mode (Triton's JSON trace file) is implemented: ``mode=opentelemetry`` is
refused with a message that says so, rather than tracing nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from workbench.core.trace import TraceLevel
from workbench.core.trace_settings import TRITON_MODE, TraceOptions
from workbench.errors import InvalidArgumentError, UnsupportedError

log = logging.getLogger("workbench.server")

_MODES = (TRITON_MODE, "opentelemetry")
_FORMAT = "--trace-config option format is '<trace mode>,<setting>=<value>'. Got {}"
_STOI = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_INT32 = 1 << 31
_UINT32 = 1 << 32
_LEVELS = {
    **dict.fromkeys(("false", "off"), TraceLevel.OFF),
    **dict.fromkeys(("true", "on", "min", "max", "timestamps"), TraceLevel.TIMESTAMPS),
    "tensors": TraceLevel.TENSORS,
}


def parse_trace_config(flags: Sequence[str]) -> TraceOptions:
    """The start-up trace setting the ``--trace-config`` flags ask for."""
    settings = [_split(flag) for flag in flags]
    values: dict[str, Any] = {}
    level, disabled = TraceLevel.OFF, False
    for mode, name, value in settings:
        if mode:
            continue
        try:
            if name == "level":
                parsed = _level(value)
                level |= parsed
                disabled |= not parsed
            elif name == "rate":
                values["rate"] = _int(value) % _UINT32  # Triton keeps a uint32
            elif name == "count":
                values["count"] = _int(value)
            elif name == "mode":
                values["mode"] = _mode(value)
            else:
                log.warning("--trace-config: unknown setting '%s' ignored", name)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f'Bad option: "--trace-config {name}".\n{exc}') from None
    mode = values.pop("mode", TRITON_MODE)
    if mode != TRITON_MODE:
        raise UnsupportedError(
            f"--trace-config mode={mode}: OpenTelemetry export is not implemented by the "
            "workbench; use mode triton (the default), which writes Triton's JSON trace file"
        )
    _triton_settings(settings, values)
    return TraceOptions(level=TraceLevel.OFF if disabled else level, **values)


def _triton_settings(settings: list[tuple[str, str, str]], values: dict[str, Any]) -> None:
    for mode, name, value in settings:
        if mode != TRITON_MODE:
            continue
        try:
            if name == "file":
                values["file"] = value
            elif name == "log-frequency":
                values["log_frequency"] = _int(value) % _UINT32
            else:
                log.warning("--trace-config: unknown setting 'triton,%s' ignored", name)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f'Bad option: "--trace-config triton,{name}".\n{exc}'
            ) from None


def _split(flag: str) -> tuple[str, str, str]:
    """``(mode, setting, value)``; mode is "" for a global setting."""
    name, comma, rest = flag.partition(",")
    mode = ""
    if comma and name:
        mode = _mode(name)
    elif comma:
        raise InvalidArgumentError(
            "No trace mode specified. --trace-config option format is <trace mode>,<setting>="
            f"<value> or <setting>=<value>. Got {flag}"
        )
    else:
        rest = flag
    setting, equals, value = rest.partition("=")
    if not equals or not setting or not value:
        raise InvalidArgumentError(_FORMAT.format(flag))
    return mode, setting, value


def _mode(text: str) -> str:
    mode = text.lower()
    if mode not in _MODES:
        raise InvalidArgumentError(
            f'invalid value for trace mode option: {mode}. Available options are "triton" and '
            '"opentelemetry"'
        )
    return mode


def _level(text: str) -> TraceLevel:
    level = _LEVELS.get(text.lower())
    if level is None:
        raise InvalidArgumentError(f"invalid value for trace level option: {text.lower()}")
    return level


def _int(text: str) -> int:
    match = _STOI.match(text)
    if match is None:
        raise InvalidArgumentError(f"Invalid option value. Got {text}")
    value = int(match[1])
    if not -_INT32 <= value < _INT32:
        raise InvalidArgumentError(f"Provided option value is out of bound. Got {text}")
    return value


__all__ = ["parse_trace_config"]
