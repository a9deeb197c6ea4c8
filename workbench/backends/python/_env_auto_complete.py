"""``auto_complete_config`` of a model with an ``EXECUTION_ENV_PATH``, run in that environment.

Triton runs a model's auto-complete in a stub of its own (``AUTOCOMPLETE_STUB``, started with
the model's environment like the instances' stubs), so a ``model.py`` that imports a package
only that environment has loads there. Without an environment our server imports the model in
its own process (``backend.auto_complete_here``); with one, ``run`` starts the environment's
interpreter on this module, which does the same there and answers in JSON:

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

from workbench.backends.python._execution_env import ExecutionEnv
from workbench.backends.python._model_config import config_from_dict, config_to_dict
from workbench.backends.python._server_stub import env_command
from workbench.backends.python._wire_messages import error_from_wire, error_to_wire
from workbench.errors import InternalError

_MODULE = "workbench.backends.python._env_auto_complete"


def run(
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
    from workbench.backends.python.backend import auto_complete_here

    question = json.load(sys.stdin)
    try:
        config = config_from_dict(question["config"])
        completed = auto_complete_here(
            config, Path(question["model_file"]), Path(question["version_path"])
        )
        answer: dict[str, Any] = {"config": completed}
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the server
        answer = {"error": error_to_wire(exc)}
    # on a line of its own after whatever the model printed
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
