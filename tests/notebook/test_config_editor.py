"""ConfigEditor without a kernel: three views of one draft, validation, diff, apply, revert."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.notebook.conftest import copy_linear
from workbench.config import parse_pbtxt
from workbench.errors import ConfigError, InvalidArgumentError, NotFoundError, UnavailableError
from workbench.notebook import ConfigEditor, Workbench


class ReloadRecorder:
    """Stands in for the server's load API: records calls, fails when told to."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.failure: Exception | None = None

    def __call__(self, name: str) -> None:
        self.calls.append(name)
        if self.failure is not None:
            raise self.failure


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return copy_linear(tmp_path / "repo", "linear")


@pytest.fixture
def reload() -> ReloadRecorder:
    return ReloadRecorder()


@pytest.fixture
def editor(model_dir: Path, reload: ReloadRecorder) -> ConfigEditor:
    return ConfigEditor("linear", model_dir, reload)


def test_editing_config_in_code_shows_in_form_and_pbtxt(editor: ConfigEditor) -> None:
    editor.config.max_batch_size = 4
    editor.config.dynamic_batching.preferred_batch_size.append(2)
    assert editor.form["max_batch_size"] == 4
    assert editor.form["dynamic_batching.preferred_batch_size"] == [2]
    assert "max_batch_size: 4" in editor.pbtxt
    assert "preferred_batch_size: 2" in editor.pbtxt


def test_form_and_pbtxt_edits_show_in_config(editor: ConfigEditor) -> None:
    editor.set("instance_group", [{"count": 2, "kind": "KIND_CPU"}])
    assert editor.config.instance_group[0].count == 2
    assert "count: 2" in editor.pbtxt
    editor.pbtxt = editor.pbtxt.replace("max_batch_size: 8", "max_batch_size: 16")
    assert editor.config.max_batch_size == 16
    assert editor.form["max_batch_size"] == 16
    replacement = parse_pbtxt(editor.pbtxt)
    replacement.response_cache.enable = True
    editor.config = replacement
    assert editor.form["response_cache.enable"] is True


def test_listeners_hear_every_change_and_in_place_edits_on_sync(editor: ConfigEditor) -> None:
    heard: list[int] = []
    editor.observe(lambda e: heard.append(e.config.max_batch_size))
    editor.set("max_batch_size", 2)
    assert heard == [2]
    editor.config.max_batch_size = 3  # in place: nobody is told until sync()
    assert heard == [2]
    assert editor.sync() is True and heard == [2, 3]
    assert editor.sync() is False and heard == [2, 3]


def test_bad_text_and_bad_values_change_nothing(editor: ConfigEditor) -> None:
    before = editor.pbtxt
    with pytest.raises(ConfigError, match=r"config.pbtxt \(editor\):1:"):
        editor.pbtxt = "max_batch_size: eight"
    with pytest.raises(InvalidArgumentError, match="whole number"):
        editor.set("max_batch_size", "eight")
    assert editor.pbtxt == before
    assert "whole number" in editor.messages()["max_batch_size"][0]
    editor.set("max_batch_size", 4)
    assert "max_batch_size" not in editor.messages()


def test_validate_lists_problems_next_to_fields(editor: ConfigEditor) -> None:
    assert editor.validate() == []
    editor.set("dynamic_batching.preferred_batch_size", [16])
    editor.set("instance_group", [{"count": 1, "kind": "KIND_CPU", "gpus": [0]}])
    problems = editor.validate()
    assert {p.field for p in problems} == {
        "dynamic_batching.preferred_batch_size",
        "instance_group[0].gpus",
    }
    assert all("model 'linear'" in p.message for p in problems)
    messages = editor.messages()
    assert "larger than max_batch_size (8)" in messages["dynamic_batching.preferred_batch_size"][0]
    assert "lists GPUs" in messages["instance_group"][0]


def test_diff_is_unified_against_disk(editor: ConfigEditor) -> None:
    assert editor.diff() == "" and not editor.dirty
    editor.set("max_batch_size", 4)
    diff = editor.diff()
    assert diff.startswith("--- linear/config.pbtxt (disk)\n+++ linear/config.pbtxt (editor)\n")
    assert "-max_batch_size: 8\n+max_batch_size: 4\n" in diff
    assert editor.dirty


def test_invalid_apply_raises_and_changes_nothing(
    editor: ConfigEditor, model_dir: Path, reload: ReloadRecorder
) -> None:
    before = (model_dir / "config.pbtxt").read_bytes()
    editor.set("max_batch_size", -1)
    with pytest.raises(ConfigError, match="not applied.*max_batch_size"):
        editor.apply()
    assert (model_dir / "config.pbtxt").read_bytes() == before
    assert not editor.backup_path.exists() and reload.calls == []
    assert editor.status.startswith("not applied")


def test_apply_writes_with_backup_then_reloads(
    editor: ConfigEditor, model_dir: Path, reload: ReloadRecorder
) -> None:
    before = (model_dir / "config.pbtxt").read_text()
    editor.set("max_batch_size", 4)
    editor.apply()
    assert reload.calls == ["linear"]
    assert parse_pbtxt((model_dir / "config.pbtxt").read_text()).max_batch_size == 4
    assert editor.backup_path.read_text() == before
    assert not editor.dirty and "applied" in editor.status
    assert [p.name for p in model_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_failed_reload_restores_the_file_and_keeps_the_draft(
    editor: ConfigEditor, model_dir: Path, reload: ReloadRecorder
) -> None:
    before = (model_dir / "config.pbtxt").read_bytes()
    reload.failure = InvalidArgumentError("load failed for model 'linear': out of memory")
    editor.set("max_batch_size", 4)
    with pytest.raises(UnavailableError, match="previous configuration keeps serving.*memory"):
        editor.apply()
    assert (model_dir / "config.pbtxt").read_bytes() == before
    assert editor.config.max_batch_size == 4 and editor.dirty
    assert "out of memory" in editor.status


def test_revert_goes_back_to_disk(editor: ConfigEditor) -> None:
    editor.set("max_batch_size", 4)
    with pytest.raises(InvalidArgumentError):
        editor.set("max_batch_size", "x")
    editor.revert()
    assert editor.config.max_batch_size == 8 and not editor.dirty
    assert editor.messages() == {}


def test_inputs_outputs_are_listed(editor: ConfigEditor) -> None:
    assert editor.inputs_outputs() == [
        {"io": "input", "name": "INPUT", "datatype": "FP32", "dims": [4]},
        {"io": "output", "name": "OUTPUT", "datatype": "FP32", "dims": [3]},
    ]


def test_text_display_without_widgets(editor: ConfigEditor) -> None:
    text = repr(editor)
    assert text.startswith("ConfigEditor('linear', same as disk)")
    assert 'name: "linear"' in text


# -- through the server --------------------------------------------------------------------------
@pytest.mark.integration
def test_apply_reloads_the_served_model(bench: Workbench, new_model: Callable[[], str]) -> None:
    name = new_model()
    editor = bench.edit(name)
    editor.set("dynamic_batching.max_queue_delay_microseconds", 2000)
    editor.set("instance_group", [{"count": 2, "kind": "KIND_CPU"}])
    editor.apply()
    served = bench.config(name)
    assert served.dynamic_batching.max_queue_delay_microseconds == 2000
    assert served.instance_group[0].count == 2
    assert bench.infer(name, {"INPUT": np.ones((1, 4))})["OUTPUT"].shape == (1, 3)


@pytest.mark.integration
def test_failing_reload_keeps_the_previous_model_serving(
    bench: Workbench, new_model: Callable[[], str]
) -> None:
    name = new_model()
    disk = (bench.repository / name / "config.pbtxt").read_bytes()
    editor = bench.edit(name)
    editor.config.default_model_filename = "missing.onnx"  # valid config, fails to load
    assert editor.validate() == []
    with pytest.raises(UnavailableError, match="keeps serving.*missing.onnx"):
        editor.apply()
    assert (bench.repository / name / "config.pbtxt").read_bytes() == disk
    assert "missing.onnx" in editor.status
    assert bench.config(name).default_model_filename == "model.onnx"  # the previous one
    assert bench.infer(name, {"INPUT": np.ones((1, 4))})["OUTPUT"].shape == (1, 3)
    row = next(r for r in bench.models().to_dict("records") if r["name"] == name)
    assert row["state"] == "READY"
    editor.revert()
    assert not editor.dirty


@pytest.mark.integration
def test_edit_unknown_model_is_a_clear_error(bench: Workbench) -> None:
    with pytest.raises(NotFoundError, match="no config.pbtxt"):
        bench.edit("nope")
