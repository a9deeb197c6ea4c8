"""Triton's logging extension: the settings ``/v2/logging`` reads and updates.

Updates follow ``HTTPAPIServer::HandleLogging`` (Triton 2.51): ``null`` leaves a setting as it
is, ``log_file`` cannot be changed over the network, ``log_format`` is ``default`` or
``ISO8601``. The settings drive Python logging of the ``workbench`` logger: a verbose level
above 0 logs DEBUG, otherwise the most detailed enabled level of info, warning and error.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from workbench.errors import InternalError, UnavailableError, UnsupportedError

_FORMATS = ("default", "ISO8601")
_SWITCHES = ("log_info", "log_warning", "log_error")


@dataclass(slots=True)
class LogSettings:
    """The server's log settings, named as Triton's ``--log-*`` flags and JSON fields."""

    log_file: str = ""
    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"
    logger_name: str = "workbench"

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``GET /v2/logging`` answers."""
        data = asdict(self)
        del data["logger_name"]
        return data

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a ``POST /v2/logging`` body; on error nothing after the bad field changes."""
        if changes.get("log_file") is not None:
            raise UnsupportedError("log file location can not be updated through network protocol")
        for name in _SWITCHES:
            value = changes.get(name)
            if value is not None:
                if not isinstance(value, bool):
                    raise InternalError("attempt to access JSON non-boolean as boolean")
                setattr(self, name, value)
        self._update_verbose(changes.get("log_verbose_level"))
        self._update_format(changes.get("log_format"))
        self.apply()

    def _update_verbose(self, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InternalError("attempt to access JSON non-unsigned-integer as unsigned-integer")
        self.log_verbose_level = value

    def _update_format(self, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, str):
            raise InternalError("attempt to access JSON non-string as string")
        if value not in _FORMATS:
            # Triton answers UNAVAILABLE here (sic).
            raise UnavailableError(f"invalid argument for --log_format, got: {value}")
        self.log_format = value

    def level(self) -> int:
        """The Python logging level these settings stand for."""
        if self.log_verbose_level > 0:
            return logging.DEBUG
        for enabled, level in (
            (self.log_info, logging.INFO),
            (self.log_warning, logging.WARNING),
            (self.log_error, logging.ERROR),
        ):
            if enabled:
                return level
        return logging.CRITICAL + 1

    def apply(self) -> None:
        """Set the level of the ``workbench`` logger from these settings."""
        logging.getLogger(self.logger_name).setLevel(self.level())


__all__ = ["LogSettings"]
