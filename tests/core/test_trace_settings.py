"""Trace settings as Triton's ``TraceManager`` keeps them: fallback, clearing, sampling, files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.core.statistics import RequestTimes
from workbench.core.trace import TraceLevel
from workbench.core.trace_settings import NewSetting, TraceManager, TraceOptions
from workbench.errors import InvalidArgumentError

ON = TraceLevel.TIMESTAMPS


def manager(tmp_path: Path, **options: object) -> TraceManager:
    return TraceManager(TraceOptions(file=str(tmp_path / "trace.json"), **options))  # type: ignore[arg-type]


def trace_one(tracer: TraceManager, model: str, request_id: str) -> bool:
    """Sample one request to ``model``; when traced, report and release it as a server would."""
    trace = tracer.sample(model)
    if trace is None:
        return False
    trace.report_request(model, 1, request_id, RequestTimes())
    trace.release()
    return True


def request_ids(path: Path) -> list[str]:
    return [e["request_id"] for e in json.loads(path.read_text()) if "request_id" in e]


def test_tracing_is_off_by_default_and_samples_nothing(tmp_path: Path) -> None:
    tracer = manager(tmp_path)
    assert not tracer.enabled
    assert tracer.sample("m") is None


def test_a_model_setting_takes_unset_fields_from_the_global_one_also_later(
    tmp_path: Path,
) -> None:
    tracer = manager(tmp_path)
    tracer.update("", NewSetting(level=ON, rate=1))
    tracer.update("m", NewSetting(rate=2))
    tracer.update("", NewSetting(rate=9, count=5))
    setting = tracer.setting("m")
    assert (setting.level, setting.rate, setting.count) == (ON, 2, 5)
    assert tracer.setting("other") is tracer.setting("")


def test_clearing_the_last_field_of_a_model_setting_returns_it_to_the_global_one(
    tmp_path: Path,
) -> None:
    tracer = manager(tmp_path, level=ON)
    tracer.update("m", NewSetting(rate=2))
    tracer.update("m", NewSetting(clear=frozenset({"rate"})))
    assert tracer.setting("m") is tracer.setting("")


def test_a_cleared_global_field_returns_to_its_start_up_value(tmp_path: Path) -> None:
    tracer = manager(tmp_path, rate=7)
    tracer.update("", NewSetting(rate=3))
    tracer.update("", NewSetting(clear=frozenset({"rate"})))
    assert tracer.setting().rate == 7


@pytest.mark.parametrize(
    ("options", "new", "reason"),
    [
        ({}, NewSetting(level=ON, rate=0), "sample rate must be non-zero"),
        ({"file": ""}, NewSetting(level=ON), "trace file name is not given"),
        ({}, NewSetting(level=ON, count=0), ""),  # (sic) a used-up count has no reason
    ],
)
def test_an_update_that_would_trace_nothing_is_refused_with_tritons_text(
    tmp_path: Path, options: dict[str, object], new: NewSetting, reason: str
) -> None:
    tracer = TraceManager(TraceOptions(**{"file": str(tmp_path / "t.json"), **options}))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError) as refused:
        tracer.update("", new)
    assert str(refused.value) == f"Attempting to set invalid trace setting :{reason}"
    tracer.update("", NewSetting(level=TraceLevel.OFF, rate=0))  # turning it off is allowed


def test_every_rate_th_request_is_traced_until_the_count_is_used_up(tmp_path: Path) -> None:
    tracer = manager(tmp_path, level=ON, rate=2, count=2)
    traced = [trace_one(tracer, "m", f"r{i}") for i in range(7)]
    assert traced == [False, True, False, True, False, False, False]
    assert tracer.setting().count == 0


def test_used_up_count_writes_the_next_indexed_file_when_all_sampled_were_collected(
    tmp_path: Path,
) -> None:
    tracer = manager(tmp_path, level=ON, rate=1, count=2)
    for request_id in ("a", "b", "c"):
        trace_one(tracer, "m", request_id)
    assert request_ids(tmp_path / "trace.json.0") == ["a", "b"]
    assert not (tmp_path / "trace.json").exists()


def test_log_frequency_rotates_indexed_files_and_the_rest_goes_to_the_next_at_close(
    tmp_path: Path,
) -> None:
    tracer = manager(tmp_path, level=ON, rate=1, log_frequency=2)
    for request_id in ("a", "b", "c", "d", "e"):
        trace_one(tracer, "m", request_id)
    tracer.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["trace.json.0", "trace.json.1", "trace.json.2"]
    assert request_ids(tmp_path / "trace.json.2") == ["e"]


def test_a_replaced_setting_appends_to_the_file_which_closes_at_shutdown(tmp_path: Path) -> None:
    tracer = manager(tmp_path, level=ON, rate=1)
    trace_one(tracer, "m", "a")
    tracer.update("", NewSetting(rate=1))  # a new setting: the old one writes what it holds
    text = (tmp_path / "trace.json").read_text()
    assert text.startswith("[") and not text.endswith("]")
    trace_one(tracer, "m", "b")
    tracer.close()
    assert request_ids(tmp_path / "trace.json") == ["a", "b"]


def test_a_trace_finishing_after_its_setting_was_replaced_is_still_written(
    tmp_path: Path,
) -> None:
    tracer = manager(tmp_path, level=ON, rate=1)
    late = tracer.sample("m")
    assert late is not None
    tracer.update("", NewSetting(level=TraceLevel.OFF))
    assert not tracer.enabled
    late.report_request("m", 1, "late", RequestTimes())
    late.release()
    tracer.close()
    assert request_ids(tmp_path / "trace.json") == ["late"]


def test_enabled_follows_any_setting_that_traces(tmp_path: Path) -> None:
    tracer = manager(tmp_path)
    tracer.update("m", NewSetting(level=ON, rate=1))
    assert tracer.enabled
    tracer.update("m", NewSetting(clear=frozenset({"level", "rate"})))
    assert not tracer.enabled


def test_a_trace_released_after_the_stop_leaves_the_closed_file_whole(tmp_path: Path) -> None:
    tracer = manager(tmp_path, level=ON, rate=1)
    early, late = tracer.sample("m"), tracer.sample("m")
    assert early is not None and late is not None
    early.report_request("m", 1, "early", RequestTimes())
    early.release()
    tracer.close()
    late.report_request("m", 1, "late", RequestTimes())
    late.release()
    assert request_ids(tmp_path / "trace.json") == ["early"]
