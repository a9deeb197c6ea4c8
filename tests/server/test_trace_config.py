"""``--trace-config`` read as tritonserver 2.51 reads it, errors in its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.conftest import write_add_model
from workbench.cli import build_parser
from workbench.core.trace import TraceLevel
from workbench.core.trace_settings import TraceOptions
from workbench.errors import InvalidArgumentError
from workbench.server.cli import server_from_args
from workbench.server.trace_config import parse_trace_config


def test_global_and_triton_mode_settings() -> None:
    flags = [
        "triton,file=/tmp/trace.json",
        "triton,log-frequency=50",
        "rate=100",
        "level=TIMESTAMPS",
        "level=tensors",
        "count=-1",
        "mode=triton",
    ]
    assert parse_trace_config(flags) == TraceOptions(
        level=TraceLevel.TIMESTAMPS | TraceLevel.TENSORS,
        rate=100,
        count=-1,
        log_frequency=50,
        file="/tmp/trace.json",
    )


def test_no_flags_leave_tritons_defaults_and_off_anywhere_turns_tracing_off() -> None:
    assert parse_trace_config([]) == TraceOptions(rate=1000, count=-1, log_frequency=0)
    assert parse_trace_config(["level=TIMESTAMPS", "level=off"]).level == TraceLevel.OFF


def test_numbers_are_read_as_stoi_reads_them_and_kept_as_triton_keeps_them() -> None:
    options = parse_trace_config(["rate=12abc", "triton,log-frequency=-1"])
    assert (options.rate, options.log_frequency) == (12, 4294967295)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("level=foo", 'Bad option: "--trace-config level".\ninvalid value for trace level '
         "option: foo"),
        ("rate=abc", 'Bad option: "--trace-config rate".\nInvalid option value. Got abc'),
        ("count=99999999999", 'Bad option: "--trace-config count".\nProvided option value is '
         "out of bound. Got 99999999999"),
        ("triton,log-frequency=x", 'Bad option: "--trace-config triton,log-frequency".\n'
         "Invalid option value. Got x"),
        (",file=x", "No trace mode specified. --trace-config option format is <trace mode>,"
         "<setting>=<value> or <setting>=<value>. Got ,file=x"),
        ("rate", "--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate"),
        ("triton,file=", "--trace-config option format is '<trace mode>,<setting>=<value>'. "
         "Got triton,file="),
        ("Zipkin,url=x", 'invalid value for trace mode option: zipkin. Available options are '
         '"triton" and "opentelemetry"'),
    ],
)  # fmt: skip
def test_bad_flags_are_refused_with_tritons_text(flag: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        parse_trace_config([flag])
    assert str(refused.value) == message


def test_opentelemetry_mode_keeps_its_entries_in_order_then_the_bsp_defaults() -> None:
    """As tritonserver 2.51 lists them after ``trace_mode`` (seen on it: the defaults not given
    come as batch size, delay, queue size)."""
    options = parse_trace_config(
        [
            "mode=opentelemetry",
            "opentelemetry,resource=a=b",
            "opentelemetry,url=http://127.0.0.1:4318/v1/traces",
            "opentelemetry,bsp_max_queue_size= 100x",
            "opentelemetry,foo=bar",
            "triton,file=/tmp/ignored.json",
            "triton,log-frequency=5",
            "level=TIMESTAMPS",
        ]
    )
    assert (options.mode, options.file, options.log_frequency) == ("opentelemetry", "", 0)
    assert options.config == (
        ("resource", "a=b"),
        ("url", "http://127.0.0.1:4318/v1/traces"),
        ("bsp_max_queue_size", "100"),
        ("foo", "bar"),
        ("bsp_max_export_batch_size", "512"),
        ("bsp_schedule_delay", "5000"),
    )


def test_bsp_defaults_come_from_the_otel_environment_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "-1")  # std::stoul wraps, uint32 keeps
    config = dict(parse_trace_config(["mode=opentelemetry"]).config)
    assert config == {
        "bsp_max_export_batch_size": "512",
        "bsp_schedule_delay": "250",
        "bsp_max_queue_size": "4294967295",
    }
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "many")
    with pytest.raises(InvalidArgumentError) as refused:
        parse_trace_config(["mode=opentelemetry"])
    assert str(refused.value) == (
        'Bad option: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE".\nInvalid option value. Got many'
    )


def test_a_bad_bsp_setting_is_refused_with_tritons_text() -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        parse_trace_config(["mode=opentelemetry", "opentelemetry,bsp_schedule_delay=soon"])
    assert str(refused.value) == (
        'Bad option: "--trace-config opentelemetry,bsp_schedule_delay".\n'
        "Invalid option value. Got soon"
    )


def test_a_modes_settings_are_read_only_in_that_mode() -> None:
    """``opentelemetry,*`` settings are not even checked in triton mode; triton mode lists its
    own unknown settings (Triton's setting API does)."""
    options = parse_trace_config(
        ["opentelemetry,bsp_schedule_delay=soon", "triton,file=/tmp/t.json", "triton,foo=bar"]
    )
    assert (options.mode, options.file, options.config) == (
        "triton",
        "/tmp/t.json",
        (("foo", "bar"),),
    )


def test_serve_takes_repeated_trace_config_flags(tmp_path: Path) -> None:
    write_add_model(tmp_path, "add")
    args = build_parser().parse_args(
        [
            "serve",
            f"--model-repository={tmp_path}",
            "--trace-config",
            f"triton,file={tmp_path / 'trace.json'}",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=1",
        ]
    )
    options = server_from_args(args).options.core.trace
    assert (options.file, options.level, options.rate) == (
        str(tmp_path / "trace.json"),
        TraceLevel.TIMESTAMPS,
        1,
    )


def test_serve_takes_the_opentelemetry_mode(tmp_path: Path) -> None:
    write_add_model(tmp_path, "add")
    args = build_parser().parse_args(
        [
            "serve",
            f"--model-repository={tmp_path}",
            "--trace-config=mode=opentelemetry",
            "--trace-config=opentelemetry,url=http://127.0.0.1:9/v1/traces",
            "--trace-config=level=TIMESTAMPS",
        ]
    )
    options = server_from_args(args).options.core.trace
    assert (options.mode, options.level) == ("opentelemetry", TraceLevel.TIMESTAMPS)
    assert options.config[0] == ("url", "http://127.0.0.1:9/v1/traces")
