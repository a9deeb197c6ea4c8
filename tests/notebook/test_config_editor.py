"""ConfigEditor without a kernel: three views of one draft, validation, diff, apply, revert."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tritonclient.grpc.model_config_pb2 import DataType

from tests.notebook.conftest import EXAMPLES, copy_linear
from workbench.config import parse_pbtxt
from workbench.errors import ConfigError, InvalidArgumentError, NotFoundError, UnavailableError
from workbench.notebook import ConfigEditor, Workbench
from workbench.repository.atomic import BACKUP_HISTORY


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
    assert editor.history() == []  # nothing was replaced


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


# -- against the model file and the ensembles that use the model ---------------------------------
@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """A copy of the example repository: linear_onnx inside the text_classifier ensemble."""
    return Path(shutil.copytree(EXAMPLES, tmp_path / "repo"))


def test_dims_the_onnx_graph_does_not_take_are_refused_in_tritons_words(
    examples: Path, reload: ReloadRecorder
) -> None:
    pytest.importorskip("onnx")
    editor = ConfigEditor("linear_onnx", examples / "linear_onnx", reload)
    before = editor.path.read_bytes()
    editor.config.input[0].dims[0] = 5  # the graph takes [-1, 4]
    problems = {p.field: p.message for p in editor.validate()}
    assert problems["input[0].dims"].startswith(
        "model 'linear_onnx', tensor 'INPUT': the model expects 2 dimensions (shape [-1,4]) "
        "but the model configuration specifies 2 dimensions (an initial batch dimension "
        "because max_batch_size > 0 followed by the explicit tensor shape, making complete "
        "shape [-1,5]); set dims: [4]"
    )
    ensemble = problems["used by ensemble 'text_classifier'"]
    assert "ensemble tensor features: inconsistent shape" in ensemble
    with pytest.raises(ConfigError, match=r"not applied.*the model expects 2 dimensions"):
        editor.apply()
    assert editor.path.read_bytes() == before and reload.calls == []
    assert editor.history() == [] and not editor.backup_path.exists()


def test_a_change_that_would_break_an_ensemble_using_the_model_is_refused(
    examples: Path, reload: ReloadRecorder
) -> None:
    preprocess = ConfigEditor("preprocess", examples / "preprocess", reload)
    preprocess.config.output[0].dims[0] = 5  # text_classifier feeds it to linear_onnx [4]
    (problem,) = preprocess.validate()
    assert problem.field == "used by ensemble 'text_classifier'"
    assert "step 0 (model 'preprocess') output 'FEATURES' has dims [5]" in problem.message
    linear = ConfigEditor("linear_onnx", examples / "linear_onnx", reload)
    linear.config.max_batch_size = 4  # the ensemble batches up to 8
    (problem,) = linear.validate()
    assert problem.message.startswith(
        "ensemble text_classifier allows maximum batch size 8, but it contains model "
        "linear_onnx which only allows maximum batch size to be 4"
    )
    with pytest.raises(ConfigError):
        linear.apply()
    assert reload.calls == []


def test_ensemble_problems_already_on_disk_are_not_blamed_on_the_edit(
    examples: Path, reload: ReloadRecorder
) -> None:
    postprocess = examples / "postprocess" / "config.pbtxt"
    postprocess.write_text(postprocess.read_text().replace("dims: [ 3 ]", "dims: [ 7 ]"))
    editor = ConfigEditor("linear_onnx", examples / "linear_onnx", reload)
    editor.set("instance_group", [{"count": 2, "kind": "KIND_CPU"}])
    assert editor.validate() == []


AUTO_COMPLETE_MODEL = """
    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(config):
            config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
            config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
            return config

        def execute(self, requests):
            return []
"""
PYTHON_CONFIG = """
    backend: "python"
    input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
    output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def python_model(root: Path, name: str, source: str) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(textwrap.dedent(PYTHON_CONFIG))
    (folder / "1" / "model.py").write_text(textwrap.dedent(source))
    return folder


def test_a_python_models_auto_complete_config_is_asked(
    tmp_path: Path, reload: ReloadRecorder
) -> None:
    editor = ConfigEditor("ac", python_model(tmp_path, "ac", AUTO_COMPLETE_MODEL), reload)
    assert editor.validate() == []
    editor.config.input[0].data_type = DataType.TYPE_INT32
    (problem,) = editor.validate()
    assert problem.field == "auto_complete_config"
    assert (
        "unable to load model 'ac', configuration expects datatype TYPE_INT32 for input 'IN', "
        "model provides TYPE_FP32" in problem.message
    )


def test_a_python_model_without_auto_complete_config_is_not_imported(
    tmp_path: Path, reload: ReloadRecorder
) -> None:
    source = 'raise RuntimeError("imported")\nclass TritonPythonModel:\n    pass\n'
    editor = ConfigEditor("plain", python_model(tmp_path, "plain", source), reload)
    editor.config.input[0].dims[0] = 8
    assert editor.validate() == []


# -- comments, layout and history --------------------------------------------------------------
COMMENTED = """\
# the example linear model; tuned by hand
name: "linear"
platform: "onnxruntime_onnx"
max_batch_size: 8  # measured on the 2-core box
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching {
  max_queue_delay_microseconds: 100  # p99 budget 5 ms
}
"""


def test_apply_keeps_comments_and_layout_of_untouched_fields(
    model_dir: Path, reload: ReloadRecorder
) -> None:
    (model_dir / "config.pbtxt").write_text(COMMENTED)
    editor = ConfigEditor("linear", model_dir, reload)
    editor.set("max_batch_size", 4)
    assert editor.warnings() == []
    assert editor.diff().endswith(
        "-max_batch_size: 8  # measured on the 2-core box\n"
        "+max_batch_size: 4  # measured on the 2-core box\n"
        ' input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        ' output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        " dynamic_batching {\n"
    )
    editor.apply()
    assert (model_dir / "config.pbtxt").read_text() == COMMENTED.replace(
        "max_batch_size: 8", "max_batch_size: 4"
    )


def test_comments_that_cannot_be_kept_are_named_before_writing(
    model_dir: Path, reload: ReloadRecorder
) -> None:
    (model_dir / "config.pbtxt").write_text(COMMENTED)
    editor = ConfigEditor("linear", model_dir, reload)
    editor.set("dynamic_batching.max_queue_delay_microseconds", 500)
    assert editor.warnings() == ["comments inside dynamic_batching are not kept: # p99 budget 5 ms"]
    editor.apply()
    assert "# p99 budget 5 ms" in editor.status
    assert "# the example linear model" in (model_dir / "config.pbtxt").read_text()
    assert editor.history()[0].path.read_text() == COMMENTED  # the original, alongside


def test_text_given_to_pbtxt_is_written_as_given(model_dir: Path, reload: ReloadRecorder) -> None:
    editor = ConfigEditor("linear", model_dir, reload)
    editor.pbtxt = COMMENTED
    assert editor.pbtxt == COMMENTED
    editor.apply()
    assert (model_dir / "config.pbtxt").read_text() == COMMENTED


def test_history_keeps_earlier_files_and_revert_goes_back_several_steps(
    editor: ConfigEditor, model_dir: Path, reload: ReloadRecorder
) -> None:
    original = (model_dir / "config.pbtxt").read_text()
    for delay in (200, 300, 400):
        editor.set("dynamic_batching.max_queue_delay_microseconds", delay)
        editor.apply()
    kept = [backup.path.read_text() for backup in editor.history()]
    assert len(kept) == 3 and kept[2] == original
    assert "300" in kept[0] and "200" in kept[1]
    assert all(b.path.name.startswith(".config.pbtxt.") for b in editor.history())
    editor.revert(steps=3)
    assert (model_dir / "config.pbtxt").read_text() == original
    assert reload.calls == ["linear"] * 4 and "reverted 'linear'" in editor.status
    assert not editor.dirty and editor.config.dynamic_batching.max_queue_delay_microseconds == 100
    assert "400" in editor.history()[0].path.read_text()  # the revert can be reverted
    with pytest.raises(InvalidArgumentError, match=r"revert\(steps=9\) needs 0 .* or 1 to 4"):
        editor.revert(steps=9)


def test_history_is_capped(editor: ConfigEditor) -> None:
    for delay in range(BACKUP_HISTORY + 2):
        editor.set("dynamic_batching.max_queue_delay_microseconds", 1000 + delay)
        editor.apply()
    kept = editor.history()
    assert len(kept) == BACKUP_HISTORY
    assert "1010" in kept[0].path.read_text()  # newest first
    assert [b.saved_at for b in kept] == sorted((b.saved_at for b in kept), reverse=True)


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
