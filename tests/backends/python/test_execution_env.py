"""``EXECUTION_ENV_PATH``: a model's stubs run on its environment's interpreter and packages.

The environments are venvs made here (``venv.create``, no pip): the same Python version as the
server, so the server's packages fill in what the environment lacks. The error messages are
tritonserver 2.51's, seen on the same repository (2026-11-26).
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import sys
import tarfile
import venv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.backends.model_folders import context_for, load_config, request, write_model
from workbench.backends.python import PythonBackend, _server_stub
from workbench.backends.python import _execution_env as execution_env
from workbench.errors import InternalError

#: what the model reports: where it runs and where its imports came from
MODEL = """
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        import shadowed

        try:
            import envonly
        except ImportError:
            envonly = None
        facts = {
            "prefix": sys.prefix,
            "executable": sys.executable,
            "activated": os.environ.get("ENV_TEST_ACTIVATED", ""),
            "libraries": os.environ.get("LD_LIBRARY_PATH", ""),
            "envonly": envonly.WHERE if envonly is not None else "missing",
            "shadowed": shadowed.WHERE,
            "numpy": np.__file__,
        }
        text = np.array([repr(facts).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]) for _ in requests]
"""


def _pbtxt(env_path: str | None) -> str:
    parameter = ""
    if env_path is not None:
        parameter = (
            f'parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{env_path}" }} }}'
        )
    return f"""
    backend: "python"
    input {{ name: "X" data_type: TYPE_FP32 dims: [1] }}
    output {{ name: "OUT" data_type: TYPE_STRING dims: [1] }}
    {parameter}
    """


def make_env(root: Path) -> Path:
    """A venv of this Python, its ``activate`` exporting a marker, with a module of its own and
    one named like a module on the server's path."""
    venv.create(root, with_pip=False, symlinks=True)
    with (root / "bin" / "activate").open("a") as activate:
        # sourced with arguments, a conda ``activate`` would hand them to ``conda activate``:
        # Triton sources it with none, so this one refuses any
        activate.write('\n[ "$#" -eq 0 ] || return 1\nexport ENV_TEST_ACTIVATED=yes\n')
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = root / "lib" / version / "site-packages"
    (site / "envonly.py").write_text("WHERE = 'env'\n")
    (site / "shadowed.py").write_text("WHERE = 'env'\n")
    return root


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_env(tmp_path_factory.mktemp("execution-env") / "env")


@pytest.fixture
def server_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on the server's ``sys.path`` holding ``shadowed`` too."""
    folder = tmp_path / "server-path"
    folder.mkdir()
    (folder / "shadowed.py").write_text("WHERE = 'server'\n")
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _facts(folder: Path, made: list[Any]) -> dict[str, str]:
    instance = PythonBackend().create_instance(context_for(folder))
    made.append(instance)
    [result] = instance.execute([request({"X": np.array([1.0], dtype=np.float32)})])
    assert result.error is None, result.error
    facts: dict[str, str] = eval(result.outputs[0].array[0].decode())  # noqa: S307 - our repr
    return facts


def test_the_stub_runs_on_the_environment_activated_with_its_packages_first(
    tmp_path: Path, env: Path, server_path: Path, instances: list[Any]
) -> None:
    folder = write_model(tmp_path, "m", _pbtxt(str(env)), {"1/model.py": MODEL})
    facts = _facts(folder, instances)
    assert facts["prefix"] == str(env)
    assert facts["executable"] == str(env / "bin" / "python3")
    assert facts["activated"] == "yes"  # bin/activate was sourced, as Triton does
    assert facts["libraries"].split(os.pathsep)[0] == str(env / "lib")
    assert facts["envonly"] == "env"
    assert facts["shadowed"] == "env"  # the environment's packages come before the server's
    # the venv has no numpy: the stub's own came from the server's packages (same Python)
    assert not facts["numpy"].startswith(str(env))


def test_without_the_parameter_the_stub_runs_on_the_servers_interpreter(
    tmp_path: Path, server_path: Path, instances: list[Any], env: Path
) -> None:
    folder = write_model(tmp_path, "m", _pbtxt(None), {"1/model.py": MODEL})
    facts = _facts(folder, instances)
    assert facts["prefix"] == sys.prefix
    assert facts["shadowed"] == "server"
    assert facts["envonly"] == "missing"
    assert facts["activated"] == ""


def test_the_model_directory_keyword_and_a_conda_pack_archive(
    tmp_path: Path, env: Path, server_path: Path, instances: list[Any]
) -> None:
    folder = write_model(
        tmp_path, "m", _pbtxt("$$TRITON_MODEL_DIRECTORY/env.tar.gz"), {"1/model.py": MODEL}
    )
    with tarfile.open(folder / "env.tar.gz", "w:gz") as archive:
        archive.add(env, arcname=".")
    facts = _facts(folder, instances)
    extracted = Path(facts["prefix"])
    assert extracted.parent.name.startswith("python_env_")  # Triton's /tmp/python_env_XXXXXX
    assert facts["activated"] == "yes"
    assert facts["envonly"] == "env"
    # a second instance of the model uses the same extraction
    assert Path(_facts(folder, instances)["prefix"]) == extracted


def test_a_changed_archive_is_extracted_again_in_the_same_place(
    tmp_path: Path, env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive_path = tmp_path / "env.tar.gz"
    with tarfile.open(archive_path, "w:gz") as archive:
        archive.add(env, arcname=".")
    config = load_config(write_model(tmp_path, "m", _pbtxt(str(archive_path)), {}))
    with caplog.at_level(logging.INFO, logger="workbench.backends.python"):
        first = execution_env.resolve(config, tmp_path / "m")
        assert first is not None and not (first.root / "added.txt").exists()
        assert execution_env.resolve(config, tmp_path / "m") == first
    used = [r.getMessage() for r in caplog.records if "execution env" in r.getMessage()]
    assert used == [f"Using Python execution env {archive_path} ({first.python})"]  # once
    added = tmp_path / "added.txt"
    added.write_text("new\n")
    with tarfile.open(archive_path, "w:gz") as archive:
        archive.add(env, arcname=".")
        archive.add(added, arcname="added.txt")
    stamp = archive_path.stat().st_mtime + 10
    os.utime(archive_path, (stamp, stamp))
    second = execution_env.resolve(config, tmp_path / "m")
    assert second is not None and second.root == first.root
    assert (second.root / "added.txt").read_text() == "new\n"


def test_an_archive_that_fails_to_extract_leaves_nothing_for_the_next_one(
    tmp_path: Path, env: Path
) -> None:
    """The broken archive's members extracted before the error are removed, and the next
    archive gets a folder of its own."""
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.txt").write_text("x\n")
    member = io.BytesIO()
    with tarfile.open(fileobj=member, mode="w") as archive:
        archive.add(junk, arcname="junk")
    broken = tmp_path / "broken.tar.gz"  # its member, then bytes that are not gzip
    broken.write_bytes(gzip.compress(member.getvalue()[:1536]) + b"not gzip")
    config = load_config(write_model(tmp_path, "m", _pbtxt(str(broken)), {}))
    with pytest.raises(InternalError, match="Failed to extract the Python execution environment"):
        execution_env.resolve(config, tmp_path / "m")
    good = tmp_path / "good.tar.gz"
    with tarfile.open(good, "w:gz") as archive:
        archive.add(env, arcname=".")
    config = load_config(write_model(tmp_path, "n", _pbtxt(str(good)), {}))
    resolved = execution_env.resolve(config, tmp_path / "n")
    assert resolved is not None and (resolved.root / "bin" / "activate").exists()
    assert not (resolved.root / "junk").exists()
    assert not any((folder / "junk").exists() for folder in resolved.root.parent.iterdir())


def test_a_path_that_does_not_exist_fails_the_load_with_tritons_message(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    folder = write_model(tmp_path, "m", _pbtxt(str(missing)), {"1/model.py": MODEL})
    with pytest.raises(InternalError) as raised:
        PythonBackend().create_instance(context_for(folder))
    assert raised.value.message == f"Failed to get the canonical path for {missing}."


def test_an_environment_without_activate_fails_the_load_with_tritons_message(
    tmp_path: Path,
) -> None:
    folder = write_model(
        tmp_path, "m", _pbtxt("$$TRITON_MODEL_DIRECTORY/bare"), {"1/model.py": MODEL}
    )
    (folder / "bare" / "bin").mkdir(parents=True)
    with pytest.raises(InternalError) as raised:
        PythonBackend().create_instance(context_for(folder))
    activate = folder / "bare" / "bin" / "activate"
    assert raised.value.message == (
        f"Path {activate} does not exist. The Python environment should contain an "
        "'activate' script."
    )


def test_another_python_version_gets_workbench_but_not_the_servers_packages(env: Path) -> None:
    """Compiled modules load only into the version they were built for: the stub of an
    environment on another Python version is given ``workbench`` alone (its boot imports it
    from the server's package root without putting that root on ``sys.path``)."""
    other = execution_env.ExecutionEnv(env, env / "bin" / "python3", (2, 7))
    command, variables = _server_stub._child_command(other, [3, 4, 5])
    assert command[:2] == ["bash", "-c"]
    assert command[4:6] == [str(env / "bin" / "activate"), str(env / "bin" / "python3")]
    assert command[-3:] == ["3", "4", "5"]
    assert Path(variables["WORKBENCH_STUB_ROOT"], "workbench").is_dir()
    assert "WORKBENCH_STUB_PATHS" not in variables
    same = execution_env.ExecutionEnv(env, env / "bin" / "python3", sys.version_info[:2])
    _, variables = _server_stub._child_command(same, [3, 4, 5])
    assert sys.prefix in variables["WORKBENCH_STUB_PATHS"]


#: imports at its top a module that only the environment has, and completes the config
COMPLETING_MODEL = """
import envonly
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_output({"name": "FROM_" + envonly.WHERE.upper(), "data_type": "TYPE_FP32",
                           "dims": [1]})
        config.set_max_batch_size(4)
        return config

    def execute(self, requests):
        return []
"""


def test_auto_complete_runs_in_the_environment(tmp_path: Path, env: Path) -> None:
    """As Triton's auto-complete stub: a ``model.py`` whose imports only its environment has
    completes its configuration there (in the server's process its import would fail)."""
    folder = write_model(tmp_path, "m", _pbtxt(str(env)), {"1/model.py": COMPLETING_MODEL})
    config = load_config(folder)
    PythonBackend().auto_complete(config, folder, folder / "1")
    assert config.max_batch_size == 4
    assert [output.name for output in config.output] == ["OUT", "FROM_ENV"]
    assert config.parameters["EXECUTION_ENV_PATH"].string_value == str(env)


def test_a_model_failing_at_import_in_the_environment_fails_with_tritons_wording(
    tmp_path: Path, env: Path
) -> None:
    model = "import envonly\nraise RuntimeError('boom from ' + envonly.WHERE)\n"
    folder = write_model(tmp_path, "m", _pbtxt(str(env)), {"1/model.py": model})
    with pytest.raises(InternalError) as raised:
        PythonBackend().auto_complete(load_config(folder), folder, folder / "1")
    message = raised.value.message
    assert message.startswith("RuntimeError: boom from env\n\nAt:\n")
    assert f"  {folder / '1' / 'model.py'}(2): <module>\n" in message
