"""``--metrics-config`` parsing: tritonserver's format errors, checked known settings."""

from __future__ import annotations

import pytest

from workbench.errors import InvalidArgumentError
from workbench.server.metrics import MetricsOptions, parse_metrics_config
from workbench.server.metrics._config import DEFAULT_QUANTILES, ReporterConfig


def test_settings_parse_and_a_later_one_wins() -> None:
    config = parse_metrics_config(
        ["summary_latencies=true", "summary_quantiles=0.5:0.05,0.9:0.01", "summary_latencies=false"]
    )
    assert config == {"summary_latencies": "false", "summary_quantiles": "0.5:0.05,0.9:0.01"}
    reporter = ReporterConfig.from_settings(config)
    assert reporter.quantiles == ((0.5, 0.05), (0.9, 0.01))
    assert (reporter.summary_latencies, reporter.counter_latencies) == (False, True)


def test_defaults_are_tritons() -> None:
    options = MetricsOptions()
    assert (options.port, options.address, options.interval_ms) == (8002, "127.0.0.1", 2000)
    reporter = ReporterConfig.from_settings({})
    assert reporter == ReporterConfig(True, False, DEFAULT_QUANTILES)
    assert [q for q, _ in reporter.quantiles] == [0.5, 0.9, 0.95, 0.99, 0.999]


@pytest.mark.parametrize("setting", ["summary_latencies", "=true", "summary_latencies=", "a,b=1"])
def test_format_errors_carry_tritons_message(setting: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_metrics_config([setting])
    assert str(caught.value) == (
        f"--metrics-config option format is <setting>=<value>. Got {setting}"
    )


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("counter_latencies=no", "expected true or false"),
        ("summary_latencies=True", "expected true or false"),
        ("summary_quantiles=0.5", "No ':' delimiter found"),
        ("summary_quantiles=0.5:x", "numbers"),
        ("summary_quantiles=1.5:0.01", "must be in [0, 1]"),
    ],
)
def test_bad_values_of_known_settings_are_refused(setting: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("[", r"\[")):
        parse_metrics_config([setting])


def test_unknown_settings_are_kept_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    assert parse_metrics_config(["future_setting=1"]) == {"future_setting": "1"}
    assert "unknown --metrics-config setting 'future_setting'" in caplog.text
