"""``--trace-config`` flags as tritonserver 2.51 reads them (``src/command_line_parser.cc``).

``--trace-config <setting>=<value>`` sets a global setting: ``level`` (OFF, TIMESTAMPS or
TENSORS, case-insensitive, repeatable: the levels add up, and OFF anywhere turns tracing off),
``rate``, ``count`` and ``mode``. ``--trace-config <mode>,<setting>=<value>`` sets one of a
mode, read only when that mode is the server's: ``triton,file`` and ``triton,log-frequency``;
``opentelemetry,url``, ``opentelemetry,resource=<key>=<value>`` (repeatable) and the batch
span processor's ``bsp_max_queue_size``, ``bsp_schedule_delay`` (ms) and
``bsp_max_export_batch_size``, which default to ``OTEL_BSP_MAX_QUEUE_SIZE``,
``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` or 2048, 5000, 512.
Numbers are read as ``std::stoi`` reads them (the ``bsp_*`` ones as ``std::stoul``, kept as
``uint32``). Errors carry Triton's texts (``Bad option: "--trace-config rate". ...``).

The mode's entries (``file`` and ``log-frequency`` aside) are kept in ``TraceOptions.config``,
in their order, then the ``bsp_*`` defaults not given: that is what the trace setting API
lists after ``trace_mode``, as Triton's ``TraceConfigMap`` does.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from typing import Any

from workbench.core.trace import TraceLevel
from workbench.core.trace_settings import OPENTELEMETRY_MODE, TRITON_MODE, TraceOptions
from workbench.errors import InvalidArgumentError

log = logging.getLogger("workbench.server")

_MODES = (TRITON_MODE, OPENTELEMETRY_MODE)
#: (setting, environment variable, default) in the order Triton lists the defaults not given
_BSP_DEFAULTS = (
    ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
    ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
    ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
)
_BSP_NAMES = tuple(name for name, _, _ in _BSP_DEFAULTS)
#: a mode's settings that the trace setting API does not list
_UNLISTED = ("file", "log-frequency")
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
    mode = values.setdefault("mode", TRITON_MODE)
    if mode == OPENTELEMETRY_MODE:
        values["config"] = _opentelemetry_settings(settings)
    else:
        _triton_settings(settings, values)
    return TraceOptions(level=TraceLevel.OFF if disabled else level, **values)


def _triton_settings(settings: list[tuple[str, str, str]], values: dict[str, Any]) -> None:
    config = []
    for mode, name, value in settings:
        if mode != TRITON_MODE:
            continue
        try:
            if name == "file":
                values["file"] = value
            elif name == "log-frequency":
                values["log_frequency"] = _int(value) % _UINT32
            else:
                config.append((name, value))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f'Bad option: "--trace-config triton,{name}".\n{exc}'
            ) from None
    values["config"] = tuple(config)


def _opentelemetry_settings(settings: list[tuple[str, str, str]]) -> tuple[tuple[str, str], ...]:
    """The opentelemetry mode's entries, ``bsp_*`` read as ``uint32``, then the defaults of
    the ``bsp_*`` not given (Triton's ``ProcessOpenTelemetryBatchSpanProcessorArgs``)."""
    config = []
    for mode, name, value in settings:
        if mode != OPENTELEMETRY_MODE or name in _UNLISTED:
            continue
        if name in _BSP_NAMES:
            try:
                value = str(_uint32(value))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(
                    f'Bad option: "--trace-config opentelemetry,{name}".\n{exc}'
                ) from None
        config.append((name, value))
    given = {name for name, _ in config}
    for name, variable, default in _BSP_DEFAULTS:
        if name in given:
            continue
        try:
            config.append((name, str(_uint32(os.environ.get(variable, default)))))
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f'Bad option: "{variable}".\n{exc}') from None
    return tuple(config)


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


def _uint32(text: str) -> int:
    """``std::stoul`` (a minus sign wraps around), stored as ``uint32``."""
    match = _STOI.match(text)
    if match is None:
        raise InvalidArgumentError(f"Invalid option value. Got {text}")
    value = int(match[1])
    if abs(value) >= 1 << 64:
        raise InvalidArgumentError(f"Provided option value is out of bound. Got {text}")
    return value % _UINT32


def _int(text: str) -> int:
    match = _STOI.match(text)
    if match is None:
        raise InvalidArgumentError(f"Invalid option value. Got {text}")
    value = int(match[1])
    if not -_INT32 <= value < _INT32:
        raise InvalidArgumentError(f"Provided option value is out of bound. Got {text}")
    return value


__all__ = ["parse_trace_config"]
