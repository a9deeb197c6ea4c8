from __future__ import annotations

import logging
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.errors import InvalidArgumentError
from workbench.repository import parse_version_folder, select_versions
from workbench.repository.versions import version_folders


def config(pbtxt: str) -> ModelConfig:
    return text_format.Parse(pbtxt, ModelConfig())


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("1", 1),
        ("42", 42),
        ("0", 0),  # Triton's code accepts a lone "0" (only leading zeros are skipped)
        ("007", None),
        ("01", None),
        ("v1", None),
        ("1a", None),
        ("-1", None),
        ("1.5", None),
        ("", None),
        ("١", None),  # a non-ASCII digit
        ("configs", None),
        ("warmup", None),
        ("initial_state", None),
    ],
)
def test_parse_version_folder(name: str, expected: int | None) -> None:
    assert parse_version_folder(name) == expected


def test_ignored_folders_are_logged_like_triton(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="workbench.repository.versions"):
        parse_version_folder("01")
        parse_version_folder("latest")

    assert caplog.messages == [
        "ignore version directory '01' which contains leading zeros in its directory name",
        "ignore version directory 'latest' which fails to convert to integral number",
    ]


def test_version_folders_only_count_directories(tmp_path: Path) -> None:
    for name in ("2", "11", "1", "03", "configs", ".5", "__pycache__"):
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version")
    (tmp_path / "config.pbtxt").write_text("")

    assert version_folders(tmp_path) == [1, 2, 11]


def test_default_policy_is_latest_one() -> None:
    assert select_versions(ModelConfig(), [1, 3, 2]) == [3]
    assert select_versions(None, [5, 4]) == [5]


def test_latest_n() -> None:
    latest_two = config("version_policy: { latest: { num_versions: 2 } }")

    assert select_versions(latest_two, [1, 10, 3, 7]) == [7, 10]
    assert select_versions(latest_two, [4]) == [4]


def test_latest_zero_loads_nothing_and_fails() -> None:
    latest_zero = config("version_policy: { latest: { } }")

    with pytest.raises(InvalidArgumentError) as info:
        select_versions(latest_zero, [1, 2], model_name="m")

    assert str(info.value) == (
        "at least one version must be available under the version policy of model 'm'"
    )


def test_all() -> None:
    every = config("version_policy: { all: { } }")

    assert select_versions(every, [3, 1, 2, 2]) == [1, 2, 3]


def test_empty_policy_message_means_all_as_in_triton() -> None:
    assert select_versions(config("version_policy: { }"), [2, 1]) == [1, 2]


def test_specific() -> None:
    specific = config("version_policy: { specific: { versions: [ 3, 1 ] } }")

    assert select_versions(specific, [1, 2, 3, 4]) == [1, 3]


def test_specific_missing_versions_are_logged_and_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    specific = config("version_policy: { specific: { versions: [ 1, 9 ] } }")

    with caplog.at_level(logging.ERROR, logger="workbench.repository.versions"):
        selected = select_versions(specific, [1, 2], model_name="add_one")

    assert selected == [1]
    assert caplog.messages == [
        "version 9 is specified for model 'add_one', but the version directory is not present"
    ]


def test_specific_with_none_present_names_them() -> None:
    specific = config("version_policy: { specific: { versions: [ 8, 9 ] } }")

    with pytest.raises(InvalidArgumentError) as info:
        select_versions(specific, [1], model_name="add_one")

    assert str(info.value) == (
        "at least one version must be available under the version policy of model 'add_one' "
        "(specific version(s) 8, 9 have no version directory)"
    )


def test_no_versions_on_disk() -> None:
    with pytest.raises(InvalidArgumentError, match="model 'empty'"):
        select_versions(config("version_policy: { all: { } }"), [], model_name="empty")


def test_error_names_config_name_when_model_name_is_not_given() -> None:
    with pytest.raises(InvalidArgumentError, match="of model 'from_config'"):
        select_versions(ModelConfig(name="from_config"), [])
