"""A python model's ``auto_complete_config``: in the server's process, or in its environment.

Triton runs a model's auto-complete in a stub of its own (``AUTOCOMPLETE_STUB``, started with
the model's environment like the instances' stubs), so a ``model.py`` that imports a package
only that environment has loads there. Without an environment our server imports the model in
its own process (``here``); with one, ``in_env`` starts the environment's interpreter on this
module, which does the same there and answers in JSON:

- stdin: ``{"config": <the configuration as JSON>, "model_file": ..., "version_path": ...}``
- stdout: ``{"config": <the completed configuration or null>}`` or ``{"error": [category,
  message]}`` (``_wire_messages.error_to_wire``: a failure keeps its category and Triton's
  wording, e.g. "RuntimeError: boom" with the model's traceback).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.backends.python import pb_utils
from workbench.backends.python._execution_env import ExecutionEnv
from workbench.backends.python._model_config import ModelConfig, config_from_dict, config_to_dict
from workbench.backends.python._model_loader import load_module, unload_module
from workbench.backends.python._server_stub import env_command
from workbench.backends.python._wire_messages import error_from_wire, error_to_wire
from workbench.errors import ConfigError, InternalError

_MODULE = "workbench.backends.python._auto_complete"


def here(
    config: model_config_pb2.ModelConfig, model_file: Path, version_path: Path
) -> dict[str, Any] | None:
    """The model's ``auto_complete_config`` result, run in this process (None: the model has
    none)."""
    module = load_module(config.name, model_file)
    try:
        model_class = module.TritonPythonModel
        if not hasattr(model_class, "auto_complete_config"):
            return None
        return _run_auto_complete(model_class, config, version_path)
    finally:
        unload_module(module)


def _run_auto_complete(
    model_class: Any, config: model_config_pb2.ModelConfig, version_path: Path
) -> dict[str, Any]:
    token = pb_utils._scope.set(pb_utils._ModelScope(str(version_path)))
    try:
        result = model_class.auto_complete_config(ModelConfig(config_to_dict(config)))
    except Exception as exc:
        raise ConfigError(
            f"auto-complete failed for model '{config.name}': {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        pb_utils._scope.reset(token)
    if not isinstance(result, ModelConfig):
        raise ConfigError(
            f"auto_complete_config function in model '{config.name}' must return a valid "
            "pb.ModelConfig object."
        )
    return result.as_dict()


def in_env(
    env: ExecutionEnv,
    config: model_config_pb2.ModelConfig,
    model_file: Path,
    version_path: Path,
) -> dict[str, Any] | None:
    """The completed configuration (None: the model has no ``auto_complete_config``); the
    model's failure raises as it would in this process."""
    command, variables = env_command(env, _MODULE, [])
    question = {
        "config": config_to_dict(config),
        "model_file": str(model_file),
        "version_path": str(version_path),
    }
    finished = subprocess.run(
        command, input=json.dumps(question), capture_output=True, text=True, env=variables
    )
    try:
        answer: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise InternalError(
            f"auto-complete of model '{config.name}' in the Python execution environment "
            f"{env.root} exited with code {finished.returncode}: {finished.stderr.strip()}"
        ) from None
    error = error_from_wire(answer.get("error"))
    if error is not None:
        raise error
    completed: dict[str, Any] | None = answer.get("config")
    return completed


def main() -> int:
    """The environment's side: answer one question on stdin (see the module's docstring)."""
    question = json.load(sys.stdin)
    try:
        config = config_from_dict(question["config"])
        completed = here(config, Path(question["model_file"]), Path(question["version_path"]))
        answer: dict[str, Any] = {"config": completed}
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the server
        answer = {"error": error_to_wire(exc)}
    # on a line of its own after whatever the model printed
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
