"""Errors of ``bench.infer`` read like answers: what was wrong, what the model expects, a hint;
short in a notebook (``_render_traceback_``), the same type and status for ``except``."""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.notebook.conftest import copy_linear
from workbench.errors import InvalidArgumentError, NotFoundError, WorkbenchError
from workbench.notebook import Workbench


def _shown(error: BaseException) -> list[str]:
    """What IPython shows for ``error``: short, one line per list item, no library frames."""
    lines = error._render_traceback_()  # type: ignore[attr-defined]
    assert len(lines) < 12 and all("\n" not in line for line in lines)
    assert not any("workbench/notebook" in line or "File " in line for line in lines)
    return list(lines)


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
    assert shown[-1].startswith("hint: 'INPUT' has shape (4,), without the batch dimension: ")
    assert "x[None] or np.expand_dims(x, 0) (shape (1, 4))" in shown[-1]


def test_a_wrong_dtype_suggests_the_cast(bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        bench.infer("linear", {"INPUT": np.array([["a", "b", "c", "d"]])})
    assert _shown(caught.value)[-1] == (
        "hint: 'INPUT' is <U1 but the model takes FP32: send x.astype(np.float32)"
    )


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


def test_an_unbatched_model_gets_no_batch_dimension_hint(
    bench: Workbench, repository: Path
) -> None:
    """Metadata shows a variable first dim as -1 either way; only max_batch_size > 0 makes it
    the batch dimension."""
    folder = copy_linear(repository, "linear_unbatched")
    config = (folder / "config.pbtxt").read_text().replace("max_batch_size: 8", "max_batch_size: 0")
    config = config.replace("dims: [ 4 ]", "dims: [ -1, 4 ]").replace(
        "dims: [ 3 ]", "dims: [ -1, 3 ]"
    )
    (folder / "config.pbtxt").write_text(config.replace("dynamic_batching", "# dynamic_batching"))
    bench.load("linear_unbatched")
    with pytest.raises(InvalidArgumentError) as caught:
        bench.infer("linear_unbatched", {"INPUT": np.ones(4, np.float32)})
    shown = _shown(caught.value)
    assert "  INPUT  FP32  [-1, 4]" in shown and not any("batch dimension:" in s for s in shown)


def test_an_unknown_output_lists_the_outputs_and_the_near_name(bench: Workbench) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        bench.infer("linear", {"INPUT": np.ones((1, 4), np.float32)}, outputs=["OUTPT"])
    assert _shown(caught.value)[-3:] == [
        "'linear' returns:",
        "  OUTPUT  FP32  [-1, 3]",
        "hint: 'OUTPT' is not an output; did you mean 'OUTPUT'?",
    ]


def test_an_unloaded_model_says_so_instead_of_suggesting_its_own_name(
    bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    bench.unload(name)
    with pytest.raises(WorkbenchError) as caught:
        bench.infer(name, {"INPUT": np.ones((1, 4), np.float32)})
    assert _shown(caught.value)[-1] == (
        f"hint: '{name}' is UNAVAILABLE (unloaded); load it with bench.load('{name}')"
    )


def test_an_unknown_version_names_the_versions_that_serve(bench: Workbench) -> None:
    with pytest.raises(WorkbenchError) as caught:
        bench.infer("linear", {"INPUT": np.ones((1, 4), np.float32)}, version="7")
    assert (
        _shown(caught.value)[-1] == "hint: 'linear' serves version 1; omit version= for the newest"
    )


def test_config_of_an_unknown_model_lists_the_near_names(bench: Workbench) -> None:
    with pytest.raises(NotFoundError) as caught:
        bench.config("lineer")
    assert caught.value.status == 404 and "did you mean 'linear'?" in _shown(caught.value)


def test_the_explained_error_pickles_and_plain_python_prints_it_with_its_traceback(
    bench: Workbench,
) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        bench.infer("linear", {"WRONG": np.ones((1, 4), np.float32)})
    copy = pickle.loads(pickle.dumps(caught.value))
    assert type(copy) is InvalidArgumentError and copy.status == 400
    assert copy.message == caught.value.message and _shown(copy) == _shown(caught.value)
    printed = "".join(traceback.format_exception(caught.value))
    assert printed.startswith("Traceback") and "did you mean 'INPUT'?" in printed
