"""The ``python`` backend: runs an unchanged Triton ``model.py``, one process per instance.

By default every instance runs in its own *stub process*, as in Triton's python_backend:
``instance_group { count: 2 }`` really uses two cores, tensors cross through shared memory,
and a crashing model only fails its in-flight requests before its stub is restarted
(see ``_server_instance``).

Workbench-only parameter (real Triton ignores unknown parameters), for debugging a model with
breakpoints from a notebook::

    parameters { key: "WORKBENCH_IN_PROCESS" value: { string_value: "true" } }

keeps the instances in the server's own process (``PythonModelInstance``): ``execute`` runs on
the instance's worker thread, so a ``breakpoint()`` or a debugger attached to the kernel stops
in model code. In that mode a crash takes the server down, instances share the GIL, and helper
modules imported by plain name are shared by the models of the process.

``auto_complete_config`` runs once when the model loads, in the server's process, or with
Triton's ``EXECUTION_ENV_PATH`` parameter (a folder or a conda-pack ``.tar.gz``) in that
environment (``_auto_complete``), whose interpreter and packages also run the stubs
(``_execution_env``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.backends.base import ExecRequest, ExecResult, InstanceContext, ModelInstance
from workbench.backends.python import _auto_complete as auto_complete
from workbench.backends.python import _execution_env as execution_env
from workbench.backends.python import pb_utils
from workbench.backends.python._model_config import config_from_dict, config_to_dict
from workbench.backends.python._model_loader import load_module
from workbench.backends.python._model_runner import ModelRunner, ModelSpec
from workbench.backends.python._server_instance import ProcessModelInstance
from workbench.backends.python._server_stub import StubLaunch
from workbench.config.platforms import EXECUTION_ENV_PARAMETER, execution_env_path
from workbench.errors import NotFoundError

_log = logging.getLogger(__name__)

#: the config parameter that keeps instances in the server's process
IN_PROCESS_PARAMETER = "WORKBENCH_IN_PROCESS"


def _model_file(config: model_config_pb2.ModelConfig, version_path: Path) -> Path:
    return version_path / (config.default_model_filename or PythonBackend.default_model_filename)


def runs_in_process(config: model_config_pb2.ModelConfig) -> bool:
    """Whether the configuration asks for in-process instances (``WORKBENCH_IN_PROCESS``)."""
    parameter = config.parameters.get(IN_PROCESS_PARAMETER)
    value = parameter.string_value.strip().lower() if parameter is not None else ""
    return value in ("true", "1", "yes", "on")


class PythonBackend:
    """Triton's Python backend (``backend: "python"``)."""

    name = "python"
    default_model_filename = "model.py"

    def auto_complete(
        self, config: model_config_pb2.ModelConfig, model_path: Path, version_path: Path
    ) -> None:
        """Call ``TritonPythonModel.auto_complete_config`` (if defined) and keep its result."""
        if not config.name:
            config.name = model_path.name
        model_file = _model_file(config, version_path)
        env = None if runs_in_process(config) else execution_env.resolve(config, model_path)
        if env is None:
            completed = auto_complete.here(config, model_file, version_path)
        else:  # as Triton's auto-complete stub: the model's imports may exist only there
            completed = auto_complete.in_env(env, config, model_file, version_path)
        if completed is not None:
            config.CopyFrom(config_from_dict(completed))

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        """Start the instance's stub process (or import in-process) and run ``initialize``."""
        model_file = _model_file(context.config, context.version_path)
        if runs_in_process(context.config):
            return _in_process_instance(context, model_file)
        if not model_file.is_file():
            raise NotFoundError(f"Python model file not found in '{model_file}'")
        env = execution_env.resolve(context.config, context.model_path)
        launch = StubLaunch(
            instance_name=context.instance_name,
            model_file=model_file,
            spec=ModelSpec.of(context.config, context.instance_name),
            args=initialize_args(context),
            client=context.client,
            exit_deadline=context.exit_deadline,
            env=env,
        )
        instance = ProcessModelInstance(launch)
        instance.start()
        return instance


def _in_process_instance(context: InstanceContext, model_file: Path) -> PythonModelInstance:
    if execution_env_path(context.config, context.model_path) is not None:
        _log.warning(
            "model '%s' runs in the server's process (%s): its %s is not used",
            context.model_name,
            IN_PROCESS_PARAMETER,
            EXECUTION_ENV_PARAMETER,
        )
    module = load_module(context.model_name, model_file)
    scope = pb_utils._ModelScope(str(model_file.parent), context.client)
    instance = PythonModelInstance(context, module, scope)
    try:
        instance.initialize()
    except Exception:
        instance.discard()
        raise
    return instance


def initialize_args(context: InstanceContext) -> dict[str, str]:
    """The ``args`` dict Triton passes to ``initialize`` (every value a string)."""
    return {
        "model_config": json.dumps(config_to_dict(context.config)),
        "model_instance_kind": context.kind.removeprefix("KIND_"),
        "model_instance_name": context.instance_name,
        "model_instance_device_id": str(context.device_id),
        "model_repository": str(context.model_path),
        "model_version": str(context.model_version),
        "model_name": context.model_name,
    }


class PythonModelInstance:
    """A python model instance in the server's process (``WORKBENCH_IN_PROCESS``).

    The core calls ``execute`` from the instance's worker thread, one batch at a time.
    """

    def __init__(self, context: InstanceContext, module: Any, scope: pb_utils._ModelScope) -> None:
        self.context = context
        self._module = module
        spec = ModelSpec.of(context.config, context.instance_name)
        self._runner = ModelRunner(spec, module, scope)

    def initialize(self) -> None:
        """Build ``TritonPythonModel`` and call its ``initialize(args)``; failures raise."""
        self._runner.initialize(initialize_args(self.context))

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Run the model's ``execute`` on ``requests``; one result per request, in order."""
        return self._runner.execute(requests)

    def close(self) -> None:
        """Call the model's ``finalize`` (errors are logged) and release the instance."""
        self._runner.finalize()
        self.discard()

    def discard(self) -> None:
        """Release the module and the event loop without calling ``finalize``."""
        self._runner.discard()
