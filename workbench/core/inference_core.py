"""The protocol-neutral server: what the HTTP and gRPC front ends call.

All coroutine methods run on the server's event loop. Plain methods are cheap, non-blocking
reads of in-memory state and may be called from the loop as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import config as cfg
from workbench import threads
from workbench._types import StrPath
from workbench.core.bls_client import CoreClient
from workbench.core.ensemble import composing_models
from workbench.core.lifecycle import LoadOptions, ModelManager
from workbench.core.model import BackendModel, ServingModel, model_metadata, one_response
from workbench.core.rate_limiter import RATE_LIMIT_MODES, RateLimiter
from workbench.core.repository_answers import index_entries, load_error
from workbench.core.request import InferRequest, InferResponse
from workbench.core.response_cache import ResponseCache
from workbench.core.trace_settings import TraceManager, TraceOptions
from workbench.errors import (
    ConfigError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    WorkbenchError,
)
from workbench.repository import ModelRepository, diff_snapshots
from workbench.threads import Work

log = logging.getLogger("workbench.core")

#: The Triton release whose behaviour (and reported version) the embedded server mirrors.
TRITON_VERSION = "2.51.0"
#: how long a repository unload call waits for the unload to finish before it answers
UNLOAD_WAIT_S = 1.0
CONTROL_MODES = ("none", "explicit", "poll")


@dataclass(slots=True)
class CoreOptions:
    """Server-wide options, named after tritonserver's flags."""

    #: ``--model-control-mode``
    control_mode: str = "none"
    #: ``--load-model`` (``*`` loads every model) in explicit mode
    load_models: Sequence[str] = ()
    #: ``--repository-poll-secs``
    poll_secs: float = 15.0
    #: ``--strict-model-config`` / ``--disable-auto-complete-config``
    strict_config: bool = False
    #: ``--strict-readiness``: ready only when every model loaded at start-up is READY
    strict_readiness: bool = True
    #: ``--model-config-name``
    config_name: str | None = None
    #: number of visible NVIDIA GPUs; ``None`` detects them
    gpu_count: int | None = None
    #: ``--cache-config local,size=N``: bytes for the response cache (0 = no cache)
    cache_size: int = 0
    #: ``--rate-limit``: ``off`` or ``execution_count``
    rate_limit: str = "off"
    #: ``--rate-limit-resource name:count[:device]`` (device ignored: one pool per name here)
    rate_limit_resources: Mapping[str, int] = field(default_factory=dict)
    #: ``--allow-model-upload``: whether a load may carry model files (``file:`` parameters)
    allow_model_upload: bool = True
    #: ``--trace-config``: the trace setting at start-up
    trace: TraceOptions = field(default_factory=TraceOptions)


def detect_gpu_count() -> int:
    """Visible NVIDIA GPUs, without importing any GPU library."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


class InferenceCore:
    """Models, their lifecycle and inference, independent of any wire protocol.

    The front ends take it as ``core.contract.ServingCore`` (the metrics service as
    ``ObservableCore``); in words:

    - ``live`` / ``ready`` (properties): server liveness; readiness = started, not stopping,
      and every model that was asked to load at start-up is READY (Triton's ``--strict-readiness``
      default).
    - ``server_name`` = "triton", ``server_version`` (the Triton version we mirror).
    - ``model_ready(name, version="") -> bool`` (never raises for unknown models: False).
    - ``model_metadata(name, version="") -> dict``: Triton's JSON
      ``{"name","versions":[...str],"platform","inputs":[{"name","datatype","shape"}],"outputs":[...]}``;
      raises ``NotFoundError``/``UnavailableError``.
    - ``model_config(name, version="") -> ModelConfig`` (the completed config the model runs with).
    - ``infer_stream(request) -> AsyncIterator[InferResponse]``: the responses of a decoupled
      model as they come (``final`` on the last); one response for other models.
    - ``async infer(request) -> InferResponse``: validates inputs against the config
      (``InvalidArgumentError`` with Triton's messages), schedules, returns outputs restricted to
      ``request.requested_outputs``; response ``model_version`` is the version that ran.
    - ``statistics(name="", version="") -> dict``: ``{"model_stats": [...]}`` in Triton's format.
    - ``repository_index(ready_only=False) -> list[dict]``: ``{"name","version","state","reason"}``
      (version/state/reason omitted when unknown, as Triton does).
    - ``async load(name, config_json=None, files=None)``: load or reload; ``files`` maps
      ``"file:<relative path>"`` → bytes (Triton's load override); raises on failure, the previous
      version keeps serving.
    - ``async unload(name, unload_dependents=False)``.
    - ``async start()`` / ``async stop(timeout_s)``: load per control mode; drain then unload.
    """

    server_name = "triton"
    server_version = TRITON_VERSION

    def __init__(
        self,
        repository: ModelRepository | StrPath | Sequence[StrPath],
        options: CoreOptions | None = None,
    ) -> None:
        self.options = options or CoreOptions()
        if self.options.control_mode not in CONTROL_MODES:
            raise InvalidArgumentError(
                f"unknown model control mode '{self.options.control_mode}'; "
                f"expected one of {', '.join(CONTROL_MODES)}"
            )
        if not isinstance(repository, ModelRepository):
            repository = ModelRepository(repository)
        self.repository = repository
        gpus = self.options.gpu_count
        load_options = LoadOptions(
            strict_config=self.options.strict_config,
            config_name=self.options.config_name,
            gpu_count=detect_gpu_count() if gpus is None else gpus,
            rate_limiter=self._rate_limiter(),
            cache=ResponseCache(self.options.cache_size) if self.options.cache_size else None,
        )
        self.models = ModelManager(repository, load_options, client=lambda: self.client)
        #: the trace extension's settings; front ends sample requests under them
        self.tracer = TraceManager(self.options.trace)
        self.client: CoreClient | None = None
        self._started = False
        self._stopping = False
        self._startup_models: list[str] = []
        self._poll_task: asyncio.Task[None] | None = None
        #: unloads still finishing after their call answered (kept so they are not collected)
        self._unloads: set[asyncio.Future[None]] = set()
        #: ensembles unloaded because a model they use was: loaded again once every model
        #: they use is ready (tritonserver 2.51's dependency graph does both)
        self._waiting_ensembles: set[str] = set()

    def _rate_limiter(self) -> RateLimiter | None:
        mode = self.options.rate_limit
        if mode not in RATE_LIMIT_MODES:
            raise InvalidArgumentError(
                f"unknown rate limit mode '{mode}'; expected 'off' or 'execution_count'"
            )
        return RateLimiter(self.options.rate_limit_resources) if mode != "off" else None

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        """Load models as the control mode says and start polling when asked to."""
        self.client = CoreClient(self, asyncio.get_running_loop())
        names = self._startup_names()
        self._startup_models = names
        # The baseline is what start-up loads; changes after this point are picked up by polls.
        baseline = await threads.run(Work.FILES, self.repository.snapshot)
        await self._load_many(names)
        if self.options.control_mode == "poll":
            self._poll_task = asyncio.create_task(self._poll_forever(baseline))
        self._started = True

    async def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop accepting work, let in-flight requests finish and unload everything within
        ``timeout_s``; past it, end the stub processes still running (a hung ``execute`` or
        ``finalize``) without waiting. Returns whether everything stopped in time."""
        deadline = self.models.options.exit_deadline
        deadline.start(timeout_s)  # also bounds each instance's wait for ``finalize``
        self._stopping = True
        if self._poll_task is not None:
            self._poll_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poll_task
        try:
            await asyncio.wait_for(self.models.unload_all(), max(timeout_s, 0.0))
            # an instance whose ``finalize`` hung was ended at the deadline by its ``close``
            clean = not deadline.passed()
        except asyncio.TimeoutError:
            clean = False
            log.warning("models did not stop within the exit timeout; ending what still runs")
            deadline.expire("the exit timeout expired")
        self.models.discard_overrides()  # also when the unload above ran out of time
        self.tracer.close()  # the traces still held are written, the trace file ends
        return clean

    def _startup_names(self) -> list[str]:
        if self.options.control_mode != "explicit":
            return self.repository.model_names()
        if "*" in self.options.load_models:
            return self.repository.model_names()
        return list(dict.fromkeys(self.options.load_models))

    async def _load_many(self, names: Sequence[str]) -> list[str]:
        """Load plain models concurrently, then ensembles (which need their steps loaded);
        the names that loaded."""
        ensembles = [n for n in names if self._peek_is_ensemble(n)]
        plain = [n for n in names if n not in ensembles]
        loaded = await asyncio.gather(*(self._load_logged(n) for n in plain))
        for name in ensembles:
            loaded.append(await self._load_logged(name))
        return [name for name, ok in zip([*plain, *ensembles], loaded, strict=True) if ok]

    async def _load_logged(self, name: str) -> bool:
        try:
            await self._load_with_dependencies(name)
        except WorkbenchError as exc:
            log.error("failed to load '%s': %s", name, exc)
            return False
        log.info("successfully loaded '%s'", name)
        return True

    def _peek_is_ensemble(self, name: str) -> bool:
        try:
            config = self.repository.read_config(name, config_name=self.options.config_name)
        except WorkbenchError:
            return False
        return config is not None and cfg.is_ensemble(config)

    async def _load_with_dependencies(
        self, name: str, config: ModelConfig | None = None, path: Any = None
    ) -> None:
        peek = config
        if peek is None:
            with contextlib.suppress(WorkbenchError):
                peek = self.repository.read_config(name, config_name=self.options.config_name)
        if peek is not None and cfg.is_ensemble(peek):
            known = set(self.repository.model_names())
            for step_model in composing_models(peek):
                # A step naming no model of the repository is reported by the ensemble's own
                # load; trying to load it would only add a phantom entry to the index.
                if step_model not in known:
                    continue
                if not self.models.is_ready(step_model) and step_model != name:
                    # A step that cannot load makes the ensemble's own load fail below,
                    # with the reason recorded on the ensemble.
                    with contextlib.suppress(WorkbenchError):
                        await self._load_with_dependencies(step_model)
        await self.models.load(name, config, path)

    async def _poll_forever(self, previous: dict[str, str]) -> None:
        while True:
            await asyncio.sleep(self.options.poll_secs)
            current = await threads.run(Work.FILES, self.repository.snapshot)
            changes = diff_snapshots(previous, current)
            previous = current
            # As tritonserver 2.51 in poll mode: a model removed from the repository is
            # unloaded with the ensembles that use it, and those come back with it.
            for name in changes.removed:
                await self._unload_each([name])
            loading = [*changes.added, *changes.modified]
            self._waiting_ensembles.difference_update(loading)  # loaded here, not twice
            loaded = await self._load_many(loading)
            for name in loaded:
                await self._reload_dependents(name, skip=loading)
            await self._load_waiting_ensembles(loaded)

    # -- health and metadata -------------------------------------------------------------------
    @property
    def live(self) -> bool:
        return not self._stopping

    @property
    def ready(self) -> bool:
        if not self._started or self._stopping:
            return False
        if not self.options.strict_readiness:
            return True
        return all(self.models.is_ready(name) for name in self._startup_models)

    def model_ready(self, name: str, version: str = "") -> bool:
        return self.models.is_ready(name, version)

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.models.get(name, version)
        record = self.models.record(name)
        versions = sorted(record.versions) if record else [model.version]
        return model_metadata(model.config, versions)

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        return self.models.get(name, version).config

    def output_labels(self, name: str, version: str, output: str) -> list[str] | None:
        """Labels from the output's ``label_filename`` (classification extension)."""
        model = self.models.get(name, version)
        spec = next((o for o in model.config.output if o.name == output), None)
        if spec is None or not spec.label_filename:
            return None
        path = self.repository.model_path(name) / spec.label_filename
        try:
            return path.read_text().splitlines()
        except OSError as exc:
            raise UnavailableError(f"cannot read labels for output '{output}': {exc}") from exc

    # -- inference -----------------------------------------------------------------------------
    async def infer(self, request: InferRequest) -> InferResponse:
        if self._stopping:
            raise UnavailableError("Server is shutting down; request rejected")
        model = self.models.get(request.model_name, request.model_version)
        return await model.infer(request)

    def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response of ``request`` in order (several for a decoupled model); the last
        has ``final`` set. A request the server rejects (unknown model, bad inputs) raises
        here, at the call; an error of the model raises from the iterator."""
        if self._stopping:
            raise UnavailableError("Server is shutting down; request rejected")
        model = self.models.get(request.model_name, request.model_version)
        if isinstance(model, BackendModel):
            return model.infer_stream(request)
        return one_response(model.infer(request))

    # -- what the metrics service reads (``contract.ObservableCore``) ---------------------------
    def on_new_version(self, hook: Callable[[ServingModel], None]) -> None:
        self.models.version_hooks.append(hook)

    def serving_versions(self) -> list[tuple[str, int, ServingModel]]:
        return [
            (record.name, number, model)
            for record in self.models.records()
            for number, model in sorted(record.versions.items())
        ]

    @property
    def response_cache(self) -> ResponseCache | None:
        return self.models.options.cache

    # -- statistics ----------------------------------------------------------------------------
    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        if name and not self.models.is_ready(name, version):
            raise InvalidArgumentError(f"requested model '{name}' is not available")
        if not name:
            stats = [
                model.stats.to_json()
                for record in self.models.records()
                for _, model in sorted(record.versions.items())
            ]
            return {"model_stats": stats}
        model = self.models.get(name, version)
        if version:
            return {"model_stats": [model.stats.to_json()]}
        record = self.models.record(name)
        versions = record.versions if record else {model.version: model}
        return {"model_stats": [m.stats.to_json() for _, m in sorted(versions.items())]}

    # -- repository extension ------------------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        return index_entries(self.repository.model_names(), self.models.record, ready_only)

    def _require_model_control(self) -> None:
        if self.options.control_mode != "explicit":
            raise UnavailableError(
                "explicit model load / unload is not allowed if polling is enabled"
            )

    async def load(
        self,
        name: str,
        config_json: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Triton's repository load: optional config override and ``file:`` contents."""
        self._require_model_control()
        if files and not self.options.allow_model_upload:
            # Checked before anything is parsed or written: an upload is model code to run.
            raise InvalidArgumentError(
                f"failed to load '{name}', model file uploads ('file:' load parameters) are "
                "disabled on this server (--allow-model-upload=false)"
            )
        try:
            override = cfg.from_json(config_json) if config_json else None
        except ConfigError as exc:
            # Triton's answer names no reason ("failed to poll"): the log says what is wrong.
            log.warning("failed to load '%s': %s", name, exc)
            raise load_error(name, exc) from exc
        if files and override is None:
            # tritonserver 2.51 answers 500 "failed to poll" here too; the log says why.
            log.warning(
                "failed to load '%s': 'file:' parameters override a model's files only "
                "together with a 'config' parameter",
                name,
            )
            raise InternalError(f"failed to load '{name}', failed to poll from model repository")
        path = None
        if files:
            write = functools.partial(self.repository.write_override, config=override, files=files)
            path = await threads.run(Work.FILES, write, name)
        else:
            await self._refresh_remote(name)
        if not files and override is None and name not in self.repository.model_names():
            # Triton answers 500 (an internal error) here, not 404.
            raise InternalError(f"failed to load '{name}', failed to poll from model repository")
        self._waiting_ensembles.discard(name)
        try:
            await self._load_with_dependencies(name, override, path)
        except WorkbenchError as exc:
            raise load_error(name, exc) from exc
        await self._reload_dependents(name)
        await self._load_waiting_ensembles([name])

    async def _refresh_remote(self, name: str) -> None:
        """Copy a model of a remote repository afresh, as Triton does for each explicit load."""
        try:
            await threads.run(Work.FILES, self.repository.refresh, name)
        except WorkbenchError as exc:
            log.warning("failed to load '%s': %s", name, exc)
            raise InternalError(
                f"failed to load '{name}', failed to poll from model repository"
            ) from exc

    async def _load_waiting_ensembles(self, loaded: Collection[str]) -> None:
        """Load the ensembles that wait for a composing model (its unload took them down, or
        they no longer fitted it) once one of ``loaded``, just loaded, lets them serve."""
        for name in sorted(self._waiting_ensembles):
            record = self.models.record(name)
            config = record.config if record else None
            if config is None:
                continue
            steps = composing_models(config)
            if not any(m in loaded for m in steps) or not all(
                self.models.is_ready(m) for m in steps
            ):
                continue
            self._waiting_ensembles.discard(name)
            await self._reload_ensemble(name)

    async def _reload_dependents(self, name: str, skip: Collection[str] = ()) -> None:
        """As tritonserver 2.51: the serving ensembles that use ``name``, just loaded again,
        are loaded again too, checked against its new configuration (and so on up)."""
        for record in list(self.models.records()):
            config = record.config
            if not record.versions or config is None or not cfg.is_ensemble(config):
                continue
            if record.name not in skip and name in composing_models(config):
                await self._reload_ensemble(record.name, skip)

    async def _reload_ensemble(self, name: str, skip: Collection[str] = ()) -> None:
        """Load ensemble ``name`` again. One that no longer fits its steps is unloaded, as
        tritonserver 2.51 does (UNAVAILABLE "unloaded"; why is in the log), and waits for its
        steps to change again."""
        try:
            await self._load_with_dependencies(name)
        except WorkbenchError as exc:
            log.error("failed to load '%s': %s", name, exc)
            self._waiting_ensembles.add(name)
            await self.models.unload(name)
            await self._unload_dependents(name)
            return
        log.info("successfully loaded '%s'", name)
        await self._reload_dependents(name, skip)
        await self._load_waiting_ensembles([name])

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Triton's repository unload: the model stops serving at once; the call returns when
        the unload is done or after ``UNLOAD_WAIT_S``, whichever comes first. The rest (requests
        in flight, ``finalize``) goes on in the background with the model ``UNLOADING``, as
        in tritonserver 2.51, which answers at once even while an ``execute`` hangs."""
        self._require_model_control()
        record = self.models.record(name)
        config = record.config if record else None
        names = [name]
        if unload_dependents and config is not None and cfg.is_ensemble(config):
            names += composing_models(config)
        task = asyncio.ensure_future(self._unload_each(names))
        self._unloads.add(task)
        task.add_done_callback(self._unloads.discard)
        await asyncio.wait({task}, timeout=UNLOAD_WAIT_S)
        if task.done():
            task.result()

    async def _unload_each(self, names: Sequence[str]) -> None:
        for each in names:
            self._waiting_ensembles.discard(each)
            await self.models.unload(each)
            await self._unload_dependents(each)

    async def _unload_dependents(self, name: str) -> None:
        """Unload the serving ensembles that use ``name`` (and those that use them)."""
        for record in self.models.records():
            config = record.config
            if not record.versions or config is None or not cfg.is_ensemble(config):
                continue
            if name in composing_models(config):
                self._waiting_ensembles.add(record.name)
                await self.models.unload(record.name)
                await self._unload_dependents(record.name)


__all__ = ["TRITON_VERSION", "CoreOptions", "InferenceCore"]
