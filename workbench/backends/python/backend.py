"""The ``python`` backend: runs an unchanged Triton ``model.py`` in this process.

The core calls ``execute`` from a worker thread, one batch at a time per instance. Everything
a model sees goes through ``pb_utils`` objects, so moving an instance into its own process
(as Triton's stubs do) later only changes where ``PythonModelInstance`` lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from workbench.backends._batching import declared_output_types, fail_all
from workbench.backends.base import ExecRequest, ExecResult, InstanceContext
from workbench.backends.python import pb_utils
from workbench.backends.python._bridge import to_pb_request, to_result
from workbench.backends.python._loader import load_module, unload_module
from workbench.backends.python._model_config import ModelConfig, config_from_dict, config_to_dict
from workbench.errors import ConfigError, InternalError, UnsupportedError, WorkbenchError

_log = logging.getLogger(__name__)


def _model_file(config: model_config_pb2.ModelConfig, version_path: Path) -> Path:
    return version_path / (config.default_model_filename or PythonBackend.default_model_filename)


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
        module = load_module(config.name, _model_file(config, version_path))
        try:
            model_class = module.TritonPythonModel
            if not hasattr(model_class, "auto_complete_config"):
                return
            completed = _run_auto_complete(model_class, config, version_path)
        finally:
            unload_module(module)
        config.CopyFrom(config_from_dict(completed))

    def create_instance(self, context: InstanceContext) -> PythonModelInstance:
        """Import ``model.py``, build ``TritonPythonModel`` and call its ``initialize``."""
        config = context.config
        if config.model_transaction_policy.decoupled:
            raise UnsupportedError(
                f"model '{context.model_name}': decoupled python models are not supported yet"
            )
        model_file = _model_file(config, context.version_path)
        module = load_module(context.model_name, model_file)
        scope = pb_utils._ModelScope(str(model_file.parent), context.client)
        instance = PythonModelInstance(context, module, scope)
        try:
            instance.initialize()
        except Exception:
            instance.discard()
            raise
        return instance


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
    """One ``TritonPythonModel`` object and the private event loop for its coroutines."""

    def __init__(
        self, context: InstanceContext, module: types.ModuleType, scope: pb_utils._ModelScope
    ) -> None:
        self.context = context
        self._module = module
        self._scope = scope
        self._model: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outputs = [out.name for out in context.config.output]
        self._declared = declared_output_types(context.config)

    @contextlib.contextmanager
    def _entered(self) -> Iterator[None]:
        token = pb_utils._scope.set(self._scope)
        try:
            yield
        finally:
            pb_utils._scope.reset(token)

    def _call(self, method: str, *args: Any) -> Any:
        """Call a model method inside its scope; coroutines run on the instance's loop."""
        with self._entered():
            result = getattr(self._model, method)(*args)
            if asyncio.iscoroutine(result):
                if self._loop is None:
                    self._loop = asyncio.new_event_loop()
                result = self._loop.run_until_complete(result)
        return result

    def initialize(self) -> None:
        """Build ``TritonPythonModel`` and call its ``initialize(args)``; failures raise."""
        try:
            with self._entered():
                self._model = self._module.TritonPythonModel()
            if hasattr(self._model, "initialize"):
                self._call("initialize", initialize_args(self.context))
        except WorkbenchError:
            raise
        except Exception as exc:
            raise InternalError(
                f"failed to initialize model '{self.context.model_name}': "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def execute(self, requests: Sequence[ExecRequest]) -> list[ExecResult]:
        """Run the model's ``execute`` on ``requests``; one result per request, in order."""
        pb_requests = [to_pb_request(request, self._outputs) for request in requests]
        try:
            returned = self._call("execute", pb_requests)
            responses = self._responses(pb_requests, returned)
        except Exception as exc:
            message = str(exc) if isinstance(exc, _ExecuteError) else f"{type(exc).__name__}: {exc}"
            error = InternalError(
                f"Failed to process the request(s) for model '{self.context.model_name}', "
                f"message: {message}"
            )
            return fail_all(len(requests), error)
        name = self.context.model_name
        return [
            to_result(response, request, self._declared, name)
            for response, request in zip(responses, requests, strict=True)
        ]

    @staticmethod
    def _responses(requests: list[pb_utils.InferenceRequest], returned: Any) -> list[Any]:
        """The response of each request, returned or sent through its response sender."""
        if returned is None:
            returned = [None] * len(requests)
        if not isinstance(returned, list):
            raise _ExecuteError(
                f"Expected a list in the execute return, found type '{type(returned).__name__}'."
            )
        if len(returned) != len(requests):
            raise _ExecuteError(f"expected {len(requests)} responses, got {len(returned)}")
        responses = []
        for request, response in zip(requests, returned, strict=True):
            sender = request._sender
            if response is None and sender is not None:
                response = sender.response
            if response is None:
                raise _ExecuteError(f"no response was sent for request '{request.request_id()}'")
            responses.append(response)
        return responses

    def close(self) -> None:
        """Call the model's ``finalize`` (errors are logged) and release the instance."""
        if hasattr(self._model, "finalize"):
            try:
                self._call("finalize")
            except Exception:
                _log.exception("finalize failed for model '%s'", self.context.model_name)
        self.discard()

    def discard(self) -> None:
        """Release the module and the event loop without calling ``finalize``."""
        if self._loop is not None:
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
            self._loop.close()
            self._loop = None
        unload_module(self._module)


class _ExecuteError(Exception):
    """A broken ``execute`` contract (wrong return type or count)."""
