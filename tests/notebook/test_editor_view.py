"""The ipywidgets view follows the controller and drives it, without a kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebook.conftest import copy_linear
from workbench.notebook import ConfigEditor
from workbench.notebook.editor_view import ConfigEditorView

pytest.importorskip("ipywidgets")


@pytest.fixture
def editor(tmp_path: Path) -> ConfigEditor:
    reloads: list[str] = []
    return ConfigEditor("linear", copy_linear(tmp_path / "repo", "linear"), reloads.append)


def test_widgets_show_the_draft(editor: ConfigEditor) -> None:
    view = ConfigEditorView(editor)
    assert view.controls["max_batch_size"].value == 8
    assert view.controls["dynamic_batching"].value is True
    assert view.controls["dynamic_batching.max_queue_delay_microseconds"].value == 100
    assert view.pbtxt.value == editor.pbtxt
    assert len(view.rows_box.children) == 1
    assert "no changes" in view.diff.value


def test_code_edits_refresh_the_widgets(editor: ConfigEditor) -> None:
    view = ConfigEditorView(editor)
    editor.config.max_batch_size = 4
    editor.config.ClearField("dynamic_batching")
    editor.sync()  # what the post-cell hook does in IPython
    assert view.controls["max_batch_size"].value == 4
    assert view.controls["dynamic_batching.max_queue_delay_microseconds"].disabled
    assert "max_batch_size: 4" in view.pbtxt.value
    assert "+max_batch_size: 4" in view.diff.value


def test_widget_edits_update_the_controller(editor: ConfigEditor) -> None:
    view = ConfigEditorView(editor)
    view.controls["dynamic_batching.preferred_batch_size"].value = "2, 4"
    assert list(editor.config.dynamic_batching.preferred_batch_size) == [2, 4]
    view.pbtxt.value = editor.pbtxt.replace("max_batch_size: 8", "max_batch_size: 2")
    assert editor.config.max_batch_size == 2
    assert view.controls["max_batch_size"].value == 2
    # preferred size 4 > max_batch_size 2: the validator's message sits next to the field
    message = view.field_messages["dynamic_batching.preferred_batch_size"].value
    assert "larger than max_batch_size (2)" in message


def test_bad_input_shows_a_message_and_keeps_the_draft(editor: ConfigEditor) -> None:
    view = ConfigEditorView(editor)
    view.controls["dynamic_batching.preferred_batch_size"].value = "4, many"
    assert (
        "separated by commas" in view.field_messages["dynamic_batching.preferred_batch_size"].value
    )
    assert list(editor.config.dynamic_batching.preferred_batch_size) == []
    view.pbtxt.value = "max_batch_size: {"
    assert "config.pbtxt (editor)" in view.pbtxt_message.value
    assert editor.config.max_batch_size == 8


def test_instance_rows_and_buttons(editor: ConfigEditor) -> None:
    view = ConfigEditorView(editor)
    view._add_group()
    assert len(editor.config.instance_group) == 2 and len(view.rows_box.children) == 2
    count = view.rows_box.children[1].children[0]
    count.value = 3
    assert editor.config.instance_group[1].count == 3
    view.apply_button.click()
    assert "applied" in view.status.value
    view.controls["max_batch_size"].value = -1
    view.apply_button.click()
    assert "not applied" in view.status.value
    view.revert_button.click()
    assert view.controls["max_batch_size"].value == 8
    assert len(view.rows_box.children) == 2  # the applied file has two groups


def test_editor_displays_as_its_widget(editor: ConfigEditor) -> None:
    bundle = editor._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert editor.widget() is editor.widget()


def test_earlier_versions_can_be_restored_from_the_view(editor: ConfigEditor) -> None:
    view = ConfigEditorView(editor)
    original = editor.path.read_text()
    assert list(view.history.options) == [] and view.restore_button.disabled
    delay = view.controls["dynamic_batching.max_queue_delay_microseconds"]
    for value in (200, 300):
        delay.value = value
        view.apply_button.click()
    options = list(view.history.options)
    assert [steps for _, steps in options] == [1, 2] and options[0][0].startswith("1: ")
    view.history.value = 2
    view.restore_button.click()
    assert editor.path.read_text() == original
    assert "reverted" in view.status.value and delay.value == 100
    assert len(view.history.options) == 3


def test_the_view_warns_what_apply_would_not_keep(editor: ConfigEditor) -> None:
    view = ConfigEditorView(editor)
    view.pbtxt.value = editor.pbtxt.replace(
        "dynamic_batching {", "dynamic_batching { # tuned by hand\n"
    )
    assert view.warnings.value == ""
    view.controls["dynamic_batching.max_queue_delay_microseconds"].value = 200
    assert "# tuned by hand" in view.warnings.value
