"""Log settings: Triton's update rules and the Python logging level they set."""

from __future__ import annotations

import logging

import pytest

from workbench.errors import InternalError, UnavailableError, UnsupportedError
from workbench.server.log_settings import LogSettings


def test_defaults_match_triton() -> None:
    assert LogSettings().to_json() == {
        "log_file": "",
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "default",
    }


def test_update_sets_the_logger_level() -> None:
    settings = LogSettings(logger_name="workbench.test_log_settings")
    logger = logging.getLogger(settings.logger_name)
    settings.update({"log_verbose_level": 2, "log_format": "ISO8601", "log_file": None})
    assert logger.level == logging.DEBUG and settings.log_format == "ISO8601"
    settings.update({"log_verbose_level": 0, "log_info": False})
    assert logger.level == logging.WARNING
    settings.update({"log_warning": False, "log_error": False})
    assert logger.level > logging.CRITICAL


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"log_file": "x.log"}, UnsupportedError),
        ({"log_info": "yes"}, InternalError),
        ({"log_verbose_level": -1}, InternalError),
        ({"log_format": "xml"}, UnavailableError),
    ],
)
def test_bad_updates(changes: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        LogSettings(logger_name="workbench.test_log_settings").update(changes)
