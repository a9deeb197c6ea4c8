"""Errors of ``bench.infer`` read like answers: what was wrong, what the model expects, a hint;
short in a notebook (``_render_traceback_``), the same type and status for ``except``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workbench.errors import InvalidArgumentError, NotFoundError
from workbench.notebook import Workbench


def _shown(error: BaseException) -> list[str]:
    lines = error._render_traceback_()  # type: ignore[attr-defined]
    assert len(lines) == 1 and not any("workbench/notebook" in line for line in lines)
    return str(lines[0]).splitlines()


def test_a_wrong_input_name_lists_the_inputs_and_the_near_name(bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        bench.infer("linear", {"WRONG": np.ones((1, 4), np.float32)})
    assert caught.value.status == 400
    assert _shown(caught.value) == [
        "InvalidArgumentError: [400] unexpected inference input 'WRONG' for model 'linear'",
        "'linear' expects:",
        "  INPUT  FP32  [-1, 4]",
        "hint: 'WRONG' is not an input; did you mean 'INPUT'?",
    ]


def test_a_missing_batch_dimension_is_named(bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        bench.infer("linear", {"INPUT": np.ones(4, np.float32)})
    shown = _shown(caught.value)
    assert "unexpected shape for input 'INPUT'" in shown[0]
    assert shown[-1].startswith("hint: 'INPUT' has no batch dimension: send INPUT[None]")


def test_a_wrong_dtype_suggests_the_cast(bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        bench.infer("linear", {"INPUT": np.array([["a", "b", "c", "d"]])})
    assert _shown(caught.value)[-1] == "hint: 'INPUT' is <U1; send INPUT.astype(np.float32)"


def test_an_unknown_model_lists_the_near_names(bench: Workbench) -> None:
    with pytest.raises(NotFoundError) as caught:
        bench.infer("lineer", {"INPUT": np.ones((1, 4), np.float32)})
    shown = _shown(caught.value)
    assert shown[1] == "did you mean 'linear'?"
    assert shown[2].startswith("models in the repository: ") and "add" in shown[2]


def test_ipython_shows_the_short_block(
    bench: Workbench,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    shell = InteractiveShell.instance()
    try:
        shell.user_ns.update(bench=bench, np=np)
        result = shell.run_cell('bench.infer("linear", {"WRONG": np.ones((1, 4), np.float32)})')
    finally:
        InteractiveShell.clear_instance()
    assert isinstance(result.error_in_exec, InvalidArgumentError)
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert "did you mean 'INPUT'?" in text and "Traceback" not in text
    assert "triton_http.py" not in text and len(text.strip().splitlines()) <= 6
