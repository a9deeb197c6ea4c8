"""What the front ends (``workbench/server``) may ask of the core, as a type.

``InferenceCore`` satisfies it; so does ``tests/server/fake_core.py``'s ``FakeCore``, which the
front-end tests serve from. Lifecycle (``start``/``stop``) stays with whoever built the core
(``server/hosting.py``); the metrics service reads the models through the two narrow members
at the end instead of the model manager's records.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.core.model import ServingModel
from workbench.core.request import InferRequest, InferResponse
from workbench.core.response_cache import ResponseCache


class ServingCore(Protocol):
    """Health, metadata, inference, statistics and the repository API, protocol-neutral."""

    server_name: str
    server_version: str

    @property
    def live(self) -> bool: ...

    @property
    def ready(self) -> bool:
        """Started, not stopping, and (``--strict-readiness``) every start-up model READY."""
        ...

    def model_ready(self, name: str, version: str = "") -> bool:
        """Never raises: an unknown model is not ready."""
        ...

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """Triton's metadata JSON; ``NotFoundError``/``UnavailableError`` otherwise."""
        ...

    def model_config(self, name: str, version: str = "") -> ModelConfig:
        """The completed configuration the model runs with."""
        ...

    def output_labels(self, name: str, version: str, output: str) -> list[str] | None:
        """The classification labels of an output (``label_filename``), if it has them."""
        ...

    async def infer(self, request: InferRequest) -> InferResponse:
        """Check against the config (Triton's messages), schedule, answer one response."""
        ...

    def infer_stream(self, request: InferRequest) -> AsyncIterator[InferResponse]:
        """Every response in order (several for a decoupled model; ``final`` on the last). A
        refused request raises at the call, a model's error from the iterator."""
        ...

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """``{"model_stats": [...]}`` in Triton's format."""
        ...

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """``{"name", "version", "state", "reason"}`` entries, fields left out as Triton does."""
        ...

    async def load(
        self,
        name: str,
        config_json: str | Mapping[str, Any] | None = None,
        files: Mapping[str, bytes] | None = None,
    ) -> None:
        """Load or reload (a ``config`` override, ``file:`` contents); the old version keeps
        serving when the new one fails."""
        ...

    async def unload(self, name: str, unload_dependents: bool = False) -> None: ...


class ObservableCore(ServingCore, Protocol):
    """The core as the metrics service sees it: its versions and their statistics."""

    def on_new_version(self, hook: Callable[[ServingModel], None]) -> None:
        """Call ``hook`` with every version loaded from now on, before it serves."""
        ...

    def serving_versions(self) -> list[tuple[str, int, ServingModel]]:
        """(name, version, model) of every version serving now, by name then version."""
        ...

    @property
    def response_cache(self) -> ResponseCache | None:
        """The server's response cache (``--cache-config``), if any."""
        ...


__all__ = ["ObservableCore", "ServingCore"]
