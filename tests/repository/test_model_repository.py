from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.errors import (
    AlreadyExistsError,
    ConfigError,
    InvalidArgumentError,
    NotFoundError,
)
from workbench.repository import ModelRepository, validate_model_name

MakeModel = Callable[..., Path]


def test_model_names_sorted_skipping_hidden_and_files(
    repo_root: Path, make_model: MakeModel
) -> None:
    make_model(repo_root, "zeta")
    make_model(repo_root, "alpha")
    (repo_root / ".ipynb_checkpoints").mkdir()
    (repo_root / "README.md").write_text("not a model")

    assert ModelRepository(repo_root).model_names() == ["alpha", "zeta"]


def test_model_path_is_absolute_folder(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "add_one")

    repo = ModelRepository(str(repo_root))

    assert repo.model_path("add_one") == model_dir.resolve()
    assert "add_one" in repo
    assert "missing" not in repo


def test_unknown_model_uses_triton_load_message(repo_root: Path) -> None:
    repo = ModelRepository(repo_root)

    with pytest.raises(NotFoundError) as info:
        repo.model_path("missing")

    assert str(info.value) == "failed to load 'missing', failed to poll from model repository"


def test_hidden_folder_is_not_a_model(repo_root: Path) -> None:
    (repo_root / ".cache").mkdir()

    with pytest.raises(NotFoundError):
        ModelRepository(repo_root).model_path(".cache")


@pytest.mark.parametrize("name", ["../models", "a/b", "..", " "])
def test_model_names_that_escape_are_rejected(repo_root: Path, name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        ModelRepository(repo_root).model_path(name)
    assert name not in ModelRepository(repo_root)


def test_validate_model_name_messages() -> None:
    with pytest.raises(InvalidArgumentError, match="Model name cannot be empty"):
        validate_model_name("  ")
    with pytest.raises(InvalidArgumentError, match="must not contain path traversal"):
        validate_model_name("../etc")


def test_missing_root_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        ModelRepository(tmp_path / "nope")
    with pytest.raises(InvalidArgumentError):
        ModelRepository([])


def test_multiple_roots_merge_models(tmp_path: Path, make_model: MakeModel) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_model(first, "one")
    make_model(second, "two")

    repo = ModelRepository([first, second, first])

    assert repo.roots == (first.resolve(), second.resolve())
    assert repo.model_names() == ["one", "two"]
    assert repo.model_path("two") == (second / "two").resolve()
    assert repo.duplicates() == {}


def test_name_in_two_roots_is_an_error_for_that_model_only(
    tmp_path: Path, make_model: MakeModel
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    make_model(first, "shared")
    make_model(second, "shared")
    make_model(second, "solo")
    repo = ModelRepository([first, second])

    with pytest.raises(AlreadyExistsError) as info:
        repo.model_path("shared")

    assert "failed to poll model 'shared': not unique across all model repositories" in str(
        info.value
    )
    assert repo.model_names() == ["shared", "solo"]
    assert repo.duplicates() == {
        "shared": [(first / "shared").resolve(), (second / "shared").resolve()]
    }
    assert "shared" not in repo
    assert repo.model_path("solo") == (second / "solo").resolve()


def test_read_config_parses_config_pbtxt(repo_root: Path, make_model: MakeModel) -> None:
    make_model(repo_root, "add_one")

    config = ModelRepository(repo_root).read_config("add_one")

    assert config is not None
    assert config.name == "add_one"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert list(config.input[0].dims) == [16]


def test_missing_config_is_none(repo_root: Path, make_model: MakeModel) -> None:
    make_model(repo_root, "bare", config=None)

    assert ModelRepository(repo_root).read_config("bare") is None


def test_custom_config_name_selects_configs_folder(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "add_one")
    (model_dir / "configs").mkdir()
    (model_dir / "configs" / "h200.pbtxt").write_text('name: "add_one" max_batch_size: 64')
    repo = ModelRepository(repo_root)

    config = repo.read_config("add_one", config_name="h200")

    assert config is not None
    assert config.max_batch_size == 64
    assert repo.config_path("add_one", config_name="h200") == model_dir.resolve() / "configs" / (
        "h200.pbtxt"
    )


def test_custom_config_name_falls_back_to_config_pbtxt(
    repo_root: Path, make_model: MakeModel
) -> None:
    model_dir = make_model(repo_root, "add_one")
    repo = ModelRepository(repo_root)

    config = repo.read_config("add_one", config_name="absent")

    assert config is not None
    assert config.max_batch_size == 8
    assert repo.config_path("add_one", config_name="absent") == model_dir.resolve() / (
        "config.pbtxt"
    )


def test_custom_config_without_default_and_missing_custom_is_none(
    repo_root: Path, make_model: MakeModel
) -> None:
    make_model(repo_root, "bare", config=None)

    assert ModelRepository(repo_root).read_config("bare", config_name="absent") is None


def test_bad_config_raises_config_error_with_location(
    repo_root: Path, make_model: MakeModel
) -> None:
    make_model(repo_root, "broken", config='name: "broken"\nmax_batch_size: "eight"\n')

    with pytest.raises(ConfigError) as info:
        ModelRepository(repo_root).read_config("broken")

    assert "config.pbtxt:2:" in str(info.value)


def test_available_versions_of_named_model(repo_root: Path, make_model: MakeModel) -> None:
    make_model(repo_root, "add_one", versions=("3", "1", "10", "007", "v2"))

    assert ModelRepository(repo_root).available_versions("add_one") == [1, 3, 10]


# --- model file override (Triton's load API with file: parameters) -------------------------

CONFIG_JSON = json.dumps({"name": "over", "backend": "python", "max_batch_size": 4})


def test_write_override_creates_temp_model_folder(repo_root: Path) -> None:
    repo = ModelRepository(repo_root)

    model_dir = repo.write_override(
        "over",
        config=CONFIG_JSON,
        files={"file:1/model.py": b"print('v1')\n", "2/model.py": b"print('v2')\n"},
    )
    try:
        assert model_dir.name == "over"
        assert not model_dir.is_relative_to(repo_root)
        assert (model_dir / "1" / "model.py").read_bytes() == b"print('v1')\n"
        assert (model_dir / "2" / "model.py").read_bytes() == b"print('v2')\n"
        written = text_format.Parse((model_dir / "config.pbtxt").read_text(), ModelConfig())
        assert (written.name, written.backend, written.max_batch_size) == ("over", "python", 4)
        assert list(repo_root.iterdir()) == []
    finally:
        repo.remove_override(model_dir)
    assert not model_dir.parent.exists()


def test_write_override_accepts_model_config_message(repo_root: Path) -> None:
    repo = ModelRepository(repo_root)
    config = ModelConfig(name="over", max_batch_size=2)

    model_dir = repo.write_override("over", config=config, files={"1/model.onnx": b"\x08\x07"})
    try:
        assert "max_batch_size: 2" in (model_dir / "config.pbtxt").read_text()
        assert (model_dir / "1" / "model.onnx").read_bytes() == b"\x08\x07"
    finally:
        repo.remove_override(model_dir)


def test_config_parameter_wins_over_config_file(repo_root: Path) -> None:
    repo = ModelRepository(repo_root)

    model_dir = repo.write_override(
        "over",
        config=CONFIG_JSON,
        files={"config.pbtxt": b'name: "other"', "1/model.py": b""},
    )
    try:
        assert 'name: "over"' in (model_dir / "config.pbtxt").read_text()
    finally:
        repo.remove_override(model_dir)


def test_override_files_without_config_are_rejected(repo_root: Path) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        ModelRepository(repo_root).write_override("over", files={"1/model.py": b""})

    assert str(info.value) == "Load parameter 'config' must be specified for model file override"


def test_override_without_files_is_rejected(repo_root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="at least one 'file:' parameter"):
        ModelRepository(repo_root).write_override("over", config=CONFIG_JSON)


def test_override_with_invalid_json_config(repo_root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="Invalid config override"):
        ModelRepository(repo_root).write_override(
            "over", config='{"no_such_field": 1}', files={"1/model.py": b""}
        )


@pytest.mark.parametrize(
    "relative", ["../escape.py", "1/../../escape.py", "/etc/passwd", "file:../x", "", "."]
)
def test_override_paths_must_stay_inside(
    repo_root: Path, tmp_path: Path, relative: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp_root))

    with pytest.raises(InvalidArgumentError, match="must stay within model directory"):
        ModelRepository(repo_root).write_override(
            "over", config=CONFIG_JSON, files={relative: b"x"}
        )

    assert list(temp_root.iterdir()) == []  # the half-written folder is cleaned up
    assert not (tmp_path / "escape.py").exists()


def test_override_normalized_path_inside_is_allowed(repo_root: Path) -> None:
    repo = ModelRepository(repo_root)

    model_dir = repo.write_override("over", config=CONFIG_JSON, files={"1/../2/model.py": b"ok"})
    try:
        assert (model_dir / "2" / "model.py").read_bytes() == b"ok"
        assert not (model_dir / "1").exists()
    finally:
        repo.remove_override(model_dir)


@pytest.mark.parametrize("nested", ["1/model.py", "1/sub/model.py"])
def test_override_file_where_a_directory_is_needed(repo_root: Path, nested: str) -> None:
    with pytest.raises(InvalidArgumentError, match="directory has been created as a file"):
        ModelRepository(repo_root).write_override(
            "over", config=CONFIG_JSON, files={"1": b"", nested: b""}
        )


def test_override_directory_where_a_file_is_needed(repo_root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="a directory exists at that path"):
        ModelRepository(repo_root).write_override(
            "over", config=CONFIG_JSON, files={"1/model.py": b"", "1": b""}
        )


def test_override_rejects_bad_model_name(repo_root: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="path traversal"):
        ModelRepository(repo_root).write_override(
            "../over", config=CONFIG_JSON, files={"1/model.py": b""}
        )


def test_remove_override_leaves_other_folders_alone(repo_root: Path, make_model: MakeModel) -> None:
    model_dir = make_model(repo_root, "keep")

    ModelRepository.remove_override(model_dir)

    assert (model_dir / "config.pbtxt").is_file()


def test_at_variants_work_on_any_model_folder(repo_root: Path) -> None:
    repo = ModelRepository(repo_root)
    model_dir = repo.write_override(
        "over", config=CONFIG_JSON, files={"3/model.py": b"", "1/model.py": b""}
    )
    try:
        config = repo.read_config_at(model_dir)
        assert config is not None
        assert config.max_batch_size == 4
        assert repo.available_versions_at(model_dir) == [1, 3]
        assert repo.select_versions(config, [1, 3]) == [3]
    finally:
        repo.remove_override(model_dir)


def test_config_json_or_pb_is_an_alias_of_config(repo_root: Path) -> None:
    repo = ModelRepository(repo_root)

    model_dir = repo.write_override(
        "over", config_json_or_pb=CONFIG_JSON, files={"1/model.py": b""}
    )
    try:
        assert 'name: "over"' in (model_dir / "config.pbtxt").read_text()
    finally:
        repo.remove_override(model_dir)


def test_read_config_delegates_to_config_layer_parser(
    repo_root: Path, make_model: MakeModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = make_model(repo_root, "add_one")
    calls: list[tuple[str, str]] = []

    def parse_pbtxt(text: str, *, source: str) -> ModelConfig:
        calls.append((text, source))
        return ModelConfig(name="parsed-by-config-layer")

    monkeypatch.setattr("workbench.config.parse_pbtxt", parse_pbtxt, raising=False)
    config = ModelRepository(repo_root).read_config("add_one")

    assert config is not None
    assert config.name == "parsed-by-config-layer"
    assert calls == [
        ((model_dir / "config.pbtxt").read_text(), str(model_dir.resolve() / "config.pbtxt"))
    ]
