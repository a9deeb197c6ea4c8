"""Model lifecycle: load, atomic reload, unload, and the state of every model in the repository.

A reload builds the new versions completely before swapping them in; requests that already
hold the old version finish on it (the old one is drained, then closed). A failed load leaves
whatever was serving untouched and records the reason.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench import config as cfg
from workbench import threads
from workbench.backends import backend_for, get_backend
from workbench.backends.base import InferenceClient, InstanceContext
from workbench.backends.exit_deadline import ExitDeadline
from workbench.core.ensemble import EnsembleModel, composing_models
from workbench.core.ensemble_validation import ComposingModel, load_problems
from workbench.core.instances import InstancePool
from workbench.core.model import BackendModel, ServingModel
from workbench.core.rate_limiter import RateLimiter, Resources
from workbench.core.response_cache import ResponseCache
from workbench.core.warmup import warm_up
from workbench.errors import (
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    WorkbenchError,
)
from workbench.repository import ModelRepository
from workbench.threads import Work

#: Triton's text for each error code (``Status::CodeString``), as load errors show it
_CODE_TEXT = {
    "INTERNAL": "Internal",
    "NOT_FOUND": "Not found",
    "INVALID_ARG": "Invalid argument",
    "UNAVAILABLE": "Unavailable",
    "UNSUPPORTED": "Unsupported",
    "ALREADY_EXISTS": "Already exists",
    "CANCELLED": "Cancelled",
}


class VersionLoadError(InvalidArgumentError):
    """A version of a model failed to load (its backend, ``initialize`` or warmup failed)."""

    def __init__(self, version: int, cause: WorkbenchError) -> None:
        self.version = version
        #: what the repository index shows, e.g. ``Invalid argument: failed to run warmup ...``
        self.reason = f"{_CODE_TEXT.get(cause.code, 'Unknown')}: {cause}"
        super().__init__(f"version {version} is at UNAVAILABLE state: {self.reason};")


class ModelState(str, enum.Enum):
    READY = "READY"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass
class ModelRecord:
    """Everything known about one model name."""

    name: str
    state: ModelState | None = None
    reason: str = ""
    config: ModelConfig | None = None
    versions: dict[int, ServingModel] = field(default_factory=dict)
    #: versions that served before an unload, or the one whose load failed: Triton keeps
    #: listing them as UNAVAILABLE
    retired: list[int] = field(default_factory=list)
    #: the temporary folder of a load with ``file:`` parameters the versions run from;
    #: deleted once they are retired (unload, a reload, stop), as Triton's localize agent does
    override_dir: Path | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(slots=True)
class LoadOptions:
    strict_config: bool = False
    config_name: str | None = None
    #: server-wide, when the server runs with ``--rate-limit execution_count``
    rate_limiter: RateLimiter | None = None
    #: the server's response cache (``--cache-config``), if any
    cache: ResponseCache | None = None
    gpu_count: int = 0
    #: server-wide: started when the server exits (``--exit-timeout-secs``)
    exit_deadline: ExitDeadline = field(default_factory=ExitDeadline)


class ModelManager:
    """Owns every model's versions and state; all methods run on the server loop."""

    def __init__(
        self,
        repository: ModelRepository,
        options: LoadOptions,
        client: Callable[[], InferenceClient | None] = lambda: None,
    ) -> None:
        self.repository = repository
        self.options = options
        self._client = client
        self._records: dict[str, ModelRecord] = {}
        #: called with each new version before it warms up (the metrics endpoint installs
        #: its latency summaries on ``model.stats`` this way)
        self.version_hooks: list[Callable[[ServingModel], None]] = []

    # -- lookups -------------------------------------------------------------------------------
    def record(self, name: str) -> ModelRecord | None:
        return self._records.get(name)

    def records(self) -> list[ModelRecord]:
        return [self._records[n] for n in sorted(self._records)]

    def get(self, name: str, version: str = "") -> ServingModel:
        """The serving version for a request; raises Triton's errors for unknown/unready."""
        record = self._records.get(name)
        if record is None or record.state is None:
            raise NotFoundError(f"Request for unknown model: '{name}' is not found")
        if not record.versions:
            why = f" ({record.reason})" if record.reason not in ("", "unloaded") else ""
            raise NotFoundError(
                f"Request for unknown model: '{name}' has no available versions{why}"
            )
        if not version:
            return record.versions[max(record.versions)]
        try:
            return record.versions[int(version)]
        except (KeyError, ValueError):
            raise NotFoundError(
                f"Request for unknown model: '{name}' version {version} is not found"
            ) from None

    def is_ready(self, name: str, version: str = "") -> bool:
        try:
            self.get(name, version)
        except WorkbenchError:
            return False
        return True

    # -- load / unload -------------------------------------------------------------------------
    async def load(
        self, name: str, config: ModelConfig | None = None, path: Path | None = None
    ) -> None:
        """Load (or reload) every version of ``name`` chosen by its version policy.

        ``path`` is the temporary folder of a load with ``file:`` parameters: the record owns
        it from here, so it is deleted on failure or once its versions are retired.
        """
        record = self._records.setdefault(name, ModelRecord(name))
        async with record.lock:
            if not record.versions:
                record.state = ModelState.LOADING
            try:
                new_config, versions = await self._build_recording(record, config, path)
            except BaseException:
                self._discard_override(path, keep=record.override_dir)
                raise
            old = list(record.versions.values())
            old_dir = record.override_dir
            record.config, record.versions, record.override_dir = new_config, versions, path
            record.state, record.reason = ModelState.READY, ""
        await self._retire(old)
        self._discard_override(old_dir, keep=path)

    async def _build_recording(
        self, record: ModelRecord, config: ModelConfig | None, path: Path | None
    ) -> tuple[ModelConfig, dict[int, ServingModel]]:
        """``_build``, recording a failure's reason (and state) on the record."""
        try:
            return await self._build(record.name, config, path)
        except VersionLoadError as exc:
            record.reason = exc.reason
            record.state = ModelState.READY if record.versions else ModelState.UNAVAILABLE
            if not record.versions:  # Triton lists the version that failed
                record.retired = [exc.version]
            raise
        except WorkbenchError as exc:
            record.reason = str(exc)
            record.state = ModelState.READY if record.versions else ModelState.UNAVAILABLE
            raise
        except Exception as exc:  # user code at load time (e.g. model.py import error)
            record.reason = f"{type(exc).__name__}: {exc}"
            record.state = ModelState.READY if record.versions else ModelState.UNAVAILABLE
            raise UnavailableError(f"failed to load '{record.name}': {record.reason}") from exc

    def _discard_override(self, path: Path | None, *, keep: Path | None) -> None:
        """Delete a ``file:`` load's folder no version runs from any more."""
        if path is not None and path != keep:
            self.repository.remove_override(path)

    async def unload(self, name: str) -> None:
        record = self._records.get(name)
        if record is None:
            return  # Triton treats unloading an unknown model as success
        async with record.lock:
            old = list(record.versions.values())
            record.retired = sorted(record.versions) or record.retired
            record.versions = {}
            record.state = ModelState.UNLOADING if old else ModelState.UNAVAILABLE
            await self._retire(old)
            record.state, record.reason = ModelState.UNAVAILABLE, "unloaded"
            self._discard_override(record.override_dir, keep=None)
            record.override_dir = None

    async def unload_all(self) -> None:
        await asyncio.gather(*(self.unload(name) for name in list(self._records)))

    def discard_overrides(self) -> None:
        """Delete every ``file:`` load's folder: the server is exiting."""
        for record in self._records.values():
            self._discard_override(record.override_dir, keep=None)
            record.override_dir = None

    async def _retire(self, models: list[ServingModel]) -> None:
        """Wait for in-flight requests on replaced versions, then release them."""
        for model in models:
            await model.drain()
            await model.close()

    # -- building versions ---------------------------------------------------------------------
    async def _build(
        self, name: str, override: ModelConfig | None, path: Path | None
    ) -> tuple[ModelConfig, dict[int, ServingModel]]:
        model_path = path or self.repository.model_path(name)
        config = await threads.run(Work.FILES, self._prepare_config, name, override, model_path)
        available = self.repository.available_versions_at(model_path)
        versions = self.repository.select_versions(config, available)
        # select_versions raises when the policy leaves no version, so `versions` is non-empty.
        built: dict[int, ServingModel] = {}
        try:
            for version in versions:
                built[version] = await self._build_one(config, model_path, version)
        except BaseException:
            await self._retire(list(built.values()))
            raise
        return config, built

    def _prepare_config(self, name: str, override: ModelConfig | None, path: Path) -> ModelConfig:
        """Read, auto-complete, normalise and validate (runs in a thread: may import model.py)."""
        config = override
        if config is None:
            config = self.repository.read_config_at(path, config_name=self.options.config_name)
        if config is None:
            if self.options.strict_config:
                raise InvalidArgumentError(
                    f"failed to load '{name}': no config.pbtxt in '{path}' and auto-complete "
                    "is disabled (--disable-auto-complete-config)"
                )
            config = ModelConfig()
        if not config.name:
            config.name = name
        cfg.detect_backend(config, path)
        if not cfg.is_ensemble(config):
            if not config.backend and not config.platform:
                raise InvalidArgumentError(
                    f"failed to load '{name}': config.pbtxt names no backend or platform"
                )
            if not self.options.strict_config:
                self._auto_complete(config, path)
        cfg.fill_defaults(config, gpu_count=self.options.gpu_count)
        cfg.check(config, model_name=name, model_path=path)
        return config

    def _auto_complete(self, config: ModelConfig, path: Path) -> None:
        """The backend's auto-complete, from the latest version's files. Triton runs it while
        that version loads, so a failure (e.g. ``model.py`` raising at import) is that
        version's: "version 1 is at UNAVAILABLE state: Internal: ...", listed with its version.
        """
        latest = self.repository.available_versions_at(path)
        version_path = path / str(max(latest)) if latest else path
        try:
            get_backend(backend_for(config)).auto_complete(config, path, version_path)
        except WorkbenchError as exc:
            if not latest:
                raise
            raise VersionLoadError(max(latest), exc) from exc

    async def _build_one(self, config: ModelConfig, path: Path, version: int) -> ServingModel:
        """Build a version; a backend model's failure says which version, as Triton does."""
        started = time.monotonic_ns()
        model = await self._build_reporting_version(config, path, version)
        model.stats.load_ns = time.monotonic_ns() - started  # nv_model_load_duration_secs
        return model

    async def _build_reporting_version(
        self, config: ModelConfig, path: Path, version: int
    ) -> ServingModel:
        if cfg.is_ensemble(config):
            return await self._build_version(config, path, version)
        try:
            return await self._build_version(config, path, version)
        except WorkbenchError as exc:
            raise VersionLoadError(version, exc) from exc
        except Exception as exc:  # user code (initialize, warmup) must not escape unexplained
            cause = InternalError(f"{type(exc).__name__}: {exc}")
            raise VersionLoadError(version, cause) from exc

    async def _build_version(self, config: ModelConfig, path: Path, version: int) -> ServingModel:
        if cfg.is_ensemble(config):
            self._require_composing(config)
            ensemble = EnsembleModel(config, version, self.get)
            self._run_version_hooks(ensemble)
            return ensemble
        backend = get_backend(backend_for(config))
        instances = self._instances(config, path, version)
        pool = InstancePool(
            [context for context, _ in instances],
            resources=[needs for _, needs in instances],
            limiter=self.options.rate_limiter,
        )
        await pool.create(backend)
        model = BackendModel(config, version, pool, cache=self.options.cache, model_path=path)
        self._run_version_hooks(model)
        try:  # Triton warms up every instance before the version is READY
            await warm_up(config, path, model.instance_count, model.run_on_instance)
        except BaseException:
            await model.close()
            raise
        return model

    def _run_version_hooks(self, model: ServingModel) -> None:
        for hook in self.version_hooks:
            hook(model)

    def _require_composing(self, config: ModelConfig) -> None:
        """Refuse an ensemble whose composing models are missing, not loaded, or do not fit
        its data flow (names, data types, shapes, batch sizes); the message lists every
        problem, in Triton's words followed by what to change."""
        composing = {}
        for name in composing_models(config):
            record = self._records.get(name)
            loaded = record is not None and bool(record.versions)
            composing[name] = ComposingModel(
                known=name in self.repository or loaded,
                config=record.config if record is not None and loaded else None,
                versions=sorted(record.versions) if record is not None else (),
                failure=record.reason if record is not None else "",
            )
        problems = load_problems(config, composing)
        if problems:
            raise InvalidArgumentError("; ".join(problems))

    def _instances(
        self, config: ModelConfig, path: Path, version: int
    ) -> list[tuple[InstanceContext, Resources]]:
        """Each instance's context and rate-limiter needs: ``count`` per group, and per listed
        GPU for KIND_GPU."""
        instances = []
        for group_index, group in enumerate(config.instance_group):
            needs = Resources.of_group(group)
            group_name = group.name or f"{config.name}_{group_index}"
            kind = model_config_pb2.ModelInstanceGroup.Kind.Name(group.kind)
            devices = (list(group.gpus) or [0]) if kind == "KIND_GPU" else [0]
            slots = [(device, i) for device in devices for i in range(max(group.count, 1))]
            for number, (device, _) in enumerate(slots):
                context = InstanceContext(
                    model_name=config.name,
                    model_version=version,
                    config=config,
                    model_path=path,
                    version_path=path / str(version),
                    instance_name=f"{group_name}_{number}",
                    kind=kind,
                    device_id=device,
                    client=self._client(),
                    exit_deadline=self.options.exit_deadline,
                )
                instances.append((context, needs))
        return instances
