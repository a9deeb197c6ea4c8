"""``benchmarks/_harness.results_path``: a rerun on the same day never overwrites a result."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from benchmarks import _harness


def test_a_same_day_rerun_gets_the_next_free_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_harness, "RESULTS_DIR", tmp_path)
    today = datetime.date.today()
    first = _harness.results_path("cpu_waits")
    assert first == tmp_path / f"{today}_cpu_waits.md"
    first.write_text("run 1")
    second = _harness.results_path("cpu_waits")
    assert second == tmp_path / f"{today}_cpu_waits_2.md"
    second.with_suffix(".json").write_text("{}")  # a run that saved only its JSON so far
    assert _harness.results_path("cpu_waits") == tmp_path / f"{today}_cpu_waits_3.md"
    assert _harness.results_path("transfer") == tmp_path / f"{today}_transfer.md"
    assert first.read_text() == "run 1"
