"""promote() without real Triton: selection, production configs, hashes, versions, refusals,
atomicity (a promote killed mid-way), fsspec URIs, the report and the CLI."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.export.conftest import ALL_MODELS, snapshot
from workbench.cli import main
from workbench.config import read_config
from workbench.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from workbench.export import PromoteReport, promote
from workbench.export.tritonserver import TritonBinary
from workbench.export.verify import MISMATCH, ModelCheck

IN_PROCESS = 'parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }\n'


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_promotes_the_example_repository_with_hashes_and_clean_configs(
    source: Path, tmp_path: Path
) -> None:
    config = source / "text_python" / "config.pbtxt"
    config.write_text(config.read_text() + IN_PROCESS)
    (source / "text_python" / "config.pbtxt.bak").write_text("old")
    dest = tmp_path / "prod"

    report = promote(source, dest, verify=False)

    assert report.committed and sorted(m.model for m in report.models) == ALL_MODELS
    assert sorted(p.name for p in dest.iterdir() if p.is_dir()) == ALL_MODELS
    exported = read_config(dest / "text_python" / "config.pbtxt")
    assert "WORKBENCH_IN_PROCESS" not in exported.parameters
    assert read_config(dest / "postprocess" / "config.pbtxt").parameters["labels"].string_value
    assert not (dest / "text_python" / "config.pbtxt.bak").exists()
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    assert manifest["triton"]["schema_version"] == "2.51.0"
    assert manifest["workbench_version"] and manifest["created"]
    for name, entry in manifest["models"].items():
        assert entry["config_sha256"] == _sha(dest / name / "config.pbtxt")
        for version, detail in entry["versions"].items():
            for relative, digest in detail["files"].items():
                copied = dest / name / version / relative
                assert digest == _sha(copied)
                original = source / name / str(detail["source_version"]) / relative
                assert copied.read_bytes() == original.read_bytes()  # byte for byte
    text_python = manifest["models"]["text_python"]
    assert text_python["removed_parameters"] == ["WORKBENCH_IN_PROCESS"]
    assert (
        "-  value {" in text_python["config_diff"]
        or "WORKBENCH_IN_PROCESS" in (text_python["config_diff"])
    )
    assert text_python["source_path"] == str(source.resolve() / "text_python")
    assert json.loads((dest / "PROMOTE_REPORT.json").read_text())["committed"] is True


def test_an_execution_environment_in_the_model_folder_travels_and_one_outside_is_noted(
    source: Path, tmp_path: Path
) -> None:
    inside = "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
    for name, path in (("text_python", inside), ("preprocess", "/opt/envs/preprocess")):
        config = source / name / "config.pbtxt"
        parameter = f'parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{path}" }} }}'
        config.write_text(config.read_text() + parameter + "\n")
    (source / "text_python" / "env.tar.gz").write_bytes(b"an archive")
    dest = tmp_path / "prod"

    report = promote(source, dest, models=["text_python", "preprocess"], verify=False)

    assert (dest / "text_python" / "env.tar.gz").read_bytes() == b"an archive"
    exported = read_config(dest / "text_python" / "config.pbtxt")
    assert exported.parameters["EXECUTION_ENV_PATH"].string_value == inside
    outside = [note for note in report.notes if "EXECUTION_ENV_PATH" in note]
    assert outside == [
        "model 'preprocess': EXECUTION_ENV_PATH '/opt/envs/preprocess' is outside the model "
        "folder and was not exported; Triton needs that environment at that path (or put it "
        "in the model folder and name it '$$TRITON_MODEL_DIRECTORY/...')"
    ]


def test_an_ensemble_brings_its_composing_models(source: Path, tmp_path: Path) -> None:
    report = promote(source, tmp_path / "prod", models=["text_classifier"], verify=False)
    assert sorted(m.model for m in report.models) == [
        "linear_onnx", "postprocess", "preprocess", "text_classifier",
    ]  # fmt: skip


def test_a_model_already_there_becomes_a_new_version(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "prod"
    promote(source, dest, models=["text_python"], verify=False)
    first = (dest / "text_python" / "1" / "model.py").read_bytes()

    report = promote(source, dest, models=["text_python"], verify=False, version_policy="all")

    assert report.models[0].versions == {1: 2} and report.models[0].action == "new version"
    assert (dest / "text_python" / "1" / "model.py").read_bytes() == first
    assert (dest / "text_python" / "2" / "model.py").is_file()
    assert read_config(dest / "text_python" / "config.pbtxt").version_policy.HasField("all")
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    assert sorted(manifest["models"]["text_python"]["versions"]) == ["1", "2"]
    assert len(manifest["promotions"]) == 2
    assert manifest["models"]["text_python"]["previous_config_diff"] is not None


def test_specific_policy_names_the_promoted_version(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "prod"
    promote(source, dest, models=["preprocess"], verify=False)
    promote(source, dest, models=["preprocess"], verify=False, version_policy="specific")
    policy = read_config(dest / "preprocess" / "config.pbtxt").version_policy
    assert list(policy.specific.versions) == [2]


def test_refusals_are_clear_and_leave_dest_unchanged(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "prod"
    promote(source, dest, models=["text_python"], verify=False)
    before = snapshot(dest)
    with pytest.raises(AlreadyExistsError, match="'text_python' already exists"):
        promote(source, dest, models=["text_python"], on_conflict="refuse", verify=False)
    with pytest.raises(NotFoundError, match="model 'nope' does not exist in"):
        promote(source, dest, models=["nope"], verify=False)
    (source / "empty").mkdir()
    with pytest.raises(NotFoundError, match="'empty' has no config.pbtxt"):
        promote(source, dest, models=["empty"], verify=False)
    with pytest.raises(NotFoundError, match="no version 7"):
        promote(source, dest, models=["text_python"], versions=[7], verify=False)
    with pytest.raises(InvalidArgumentError, match="version_policy"):
        promote(source, dest, version_policy="newest", verify=False)
    with pytest.raises(InvalidArgumentError, match="on_conflict"):
        promote(source, dest, on_conflict="overwrite", verify=False)
    with pytest.raises(InvalidArgumentError, match="nothing to promote"):
        promote(source, dest, index=[], verify=False)
    assert snapshot(dest) == before
    assert [p.name for p in tmp_path.iterdir() if ".promote-" in p.name] == []


_KILLED_CHILD = """
import sys, time
from pathlib import Path
import workbench.export.model_files as files
from workbench.export import promote

real = files.copy_hashed
copied = []

def slow_copy(source, target):
    digest = real(source, target)
    copied.append(target)
    if len(copied) == 2:
        Path(sys.argv[3]).write_text("staging")
        time.sleep(60)
    return digest

files.copy_hashed = slow_copy
promote(sys.argv[1], sys.argv[2], verify=False)
"""


def test_a_promote_killed_midway_leaves_dest_unchanged(source: Path, tmp_path: Path) -> None:
    dest = tmp_path / "prod"
    promote(source, dest, models=["text_python"], verify=False)
    before = snapshot(dest)
    marker = tmp_path / "marker"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_KILLED_CHILD), str(source), str(dest), str(marker)],
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the child never reached the staging step"
        assert [p for p in tmp_path.iterdir() if ".prod.promote-" in p.name]  # staging there
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert snapshot(dest) == before

    report = promote(source, dest, verify=False)  # the next promote cleans the stale stage

    assert report.committed
    assert [p.name for p in tmp_path.iterdir() if ".prod.promote-" in p.name and p.is_dir()] == []
    assert (dest / "text_python" / "2").is_dir() and (dest / "linear_onnx" / "1").is_dir()


def test_promotes_to_an_fsspec_uri(source: Path) -> None:
    fsspec = pytest.importorskip("fsspec", reason="the fsspec extra is not installed")
    fs = fsspec.filesystem("memory")
    uri = "memory://promote-test/prod"
    try:
        promote(source, uri, models=["text_python"], verify=False)
        report = promote(source, uri, models=["text_python"], verify=False)
        assert report.models[0].versions == {1: 2}
        stored = fs.cat_file("/promote-test/prod/text_python/2/model.py")
        assert stored == (source / "text_python" / "1" / "model.py").read_bytes()
        manifest = json.loads(fs.cat_file("/promote-test/prod/MANIFEST.json"))
        assert sorted(manifest["models"]["text_python"]["versions"]) == ["1", "2"]
        assert report.manifest == f"{uri}/MANIFEST.json"
    finally:
        fs.rm("/promote-test", recursive=True)


def test_the_report_shows_as_text_html_and_json(source: Path, tmp_path: Path) -> None:
    report = promote(source, tmp_path / "prod", models=["preprocess"], verify=False)
    assert isinstance(report, PromoteReport)
    text = str(report)
    assert "preprocess" in text and "not run" in text and "MANIFEST.json" in text
    # nothing was checked on real Triton, and the headline says so (never "passed")
    assert text.splitlines()[0].endswith("; not verified on real Triton"), text
    assert "<table>" in report._repr_html_() and "preprocess" in report._repr_html_()
    saved = json.loads(report.save(tmp_path / "report.json").read_text())
    assert saved["models"][0]["model"] == "preprocess" and saved["ok"] is True


#: promote()'s spelling, wrong on the command line: a keyword argument, a quoted keyword value,
#: a call, a keyword's or function's name
_PYTHON_SPELLING = re.compile(
    r"\b[a-z_]+=|'(?:warn|new_version|refuse|latest|all|keep|specific)'|\w\(\)"
    r"|\b(?:on_conflict|version_policy|server_address|deploy_dir|find_tritonserver)\b"
)


def _cli_output(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert not _PYTHON_SPELLING.search(text), text
    return text


def test_cli_promote(source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dest = tmp_path / "prod"
    args = ["promote", "--model-repository", str(source), str(dest), "--verify", "false"]
    assert main([*args, "--model", "text_python"]) == 0
    assert "text_python" in _cli_output(capsys)
    assert main([*args, "--model", "text_python", "--on-conflict", "refuse"]) == 1
    refusal = _cli_output(capsys)
    assert "already exists" in refusal
    # the flag's spelling on the command line, not promote()'s keyword
    assert "pass --on-conflict new_version to add" in refusal
    assert main([*args, "--model", "nope"]) == 1
    assert "model 'nope' does not exist" in _cli_output(capsys)
    assert main([*args, "--version-policy", "newest"]) == 1
    assert "--version-policy must be one of" in _cli_output(capsys)
    # the flag takes one word or number: no list offered
    assert main([*args, "--model", "preprocess", "--versions", "1,2"]) == 1
    versions = _cli_output(capsys)
    assert "--versions for 'preprocess' must be latest, all or a version number" in versions
    assert "list" not in versions
    # no tritonserver where --tritonserver points: promoted, and the note says so in words
    auto = ["promote", "--model-repository", str(source), str(tmp_path / "auto")]
    assert main([*auto, "--model", "preprocess", "--tritonserver", str(tmp_path / "none")]) == 0
    assert "note: not verified: no tritonserver binary found" in _cli_output(capsys)


def test_cli_promote_refuses_a_mismatch_and_names_the_flag_that_overrides(
    source: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    promote_module = importlib.import_module("workbench.export.promote")  # not the function

    def found(path: object) -> TritonBinary:
        return TritonBinary(tmp_path / "tritonserver", None, "test")

    def disagree(report: PromoteReport, *args: object) -> None:
        for model in report.models:  # what real Triton answers when a model changed on disk
            model.check = ModelCheck(model.model, MISMATCH, "request 0: output 'UPPER' differs")

    monkeypatch.setattr(promote_module, "find_tritonserver", found)
    monkeypatch.setattr(promote_module, "_verify", disagree)
    dest = tmp_path / "prod"
    args = ["promote", "--model-repository", str(source), str(dest), "--model", "text_python"]

    assert main([*args, "--verify", "true"]) == 1
    refusal = _cli_output(capsys)
    assert "real Triton disagrees: text_python: mismatch" in refusal
    assert "(--verify warn promotes anyway)" in refusal
    assert snapshot(dest) == {}
    assert main([*args, "--verify", "warn"]) == 0
    assert "verification FAILED" in _cli_output(capsys)
    assert (dest / "text_python" / "1").is_dir()
