"""The sweep evidence ``promote()`` writes to ``MANIFEST.json``."""

from __future__ import annotations

import warnings

from tests.bench.test_result import BASE, ROWS
from workbench.bench import SweepResult
from workbench.bench.plan import apply_settings
from workbench.export.manifest import sweep_evidence


def _finished(rows: list[dict], planned: int, error: BaseException | None = None) -> SweepResult:
    axes = ["instance_count", "max_batch_size"]
    result = SweepResult("m", BASE, axes, options={"measurements": planned}, finished=False)
    result.rows.extend(rows)
    result.finish(error)
    return result


def test_a_stopped_sweep_s_evidence_says_it_is_partial_without_warning_from_the_library() -> None:
    stopped = _finished(ROWS[:2], planned=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning from here would point at manifest.py
        evidence = sweep_evidence(stopped, apply_settings(BASE, {"instance_count": 1}))
    assert evidence["partial"] is True and evidence["points"] == 2 and evidence["planned"] == 4
    assert evidence["settings"] == {"instance_count": 1, "max_batch_size": 8}
    assert evidence["applied"] is True


def test_a_complete_sweep_s_evidence_is_not_partial() -> None:
    evidence = sweep_evidence(_finished(ROWS, planned=4), BASE)
    assert evidence["partial"] is False and evidence["points"] == evidence["planned"] == 4
    assert evidence["settings"]["instance_count"] == 2 and evidence["applied"] is False
