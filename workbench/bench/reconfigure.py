"""How a sweep puts each point's configuration on the server: two ways, one protocol.

``ScratchCopy`` is for a server that reads the same folder as this process (the embedded
server, a tritonserver started here): the sweep measures a copy of the model under
``<name>__sweep`` whose ``config.pbtxt`` it rewrites per point, and the user's model keeps
serving as it was.

``ConfigOverride`` is for a server whose files are out of reach (``Workbench.connect``, a
remote Triton): the model itself is reloaded with each point's configuration through Triton's
load API (``{"parameters": {"config": "<json>"}}``), as Model Analyzer's remote mode does,
and loaded back afterwards with the configuration it served before the sweep. Facts from
tritonserver 2.51 this relies on (``tests/notebook/test_remote.py`` checks them):

- a load with an override serves that configuration (``/config`` shows it, the index keeps
  the version READY); the override's ``name`` must be the model's, else the load answers 500
  "failed to poll from model repository" and the previous configuration keeps serving;
- a plain load after an override keeps serving the override while the model's files are
  unchanged, so going back means loading the earlier configuration as an override too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from workbench.bench.scratch import make_scratch, remove_scratch, write_scratch_config
from workbench.config import ModelConfig, to_json_dict


class Reconfiguration(Protocol):
    """Loads each point's configuration, and undoes what it did when the sweep ends."""

    @property
    def target(self) -> str:
        """The model the load is sent to (and the sweep measures)."""
        ...

    @property
    def model_path(self) -> Path:
        """The folder the configuration is validated against (version folders, model file)."""
        ...

    async def prepare(self, control: Any) -> None: ...

    async def load(self, control: Any, config: ModelConfig) -> None:
        """Serve ``config`` as ``target`` (a failed load raises the server's error)."""
        ...

    async def restore(self, control: Any) -> None: ...


@dataclass
class ScratchCopy:
    """A copy of ``model_dir`` next to it in ``repository``, reconfigured per point."""

    model: str
    model_dir: Path
    repository: Path
    scratch: Path | None = None

    @property
    def target(self) -> str:
        return self.model_path.name

    @property
    def model_path(self) -> Path:
        return self.scratch if self.scratch is not None else self.model_dir

    async def prepare(self, control: Any) -> None:
        self.scratch = make_scratch(self.model_dir, self.repository, self.model)

    async def load(self, control: Any, config: ModelConfig) -> None:
        assert self.scratch is not None, "prepare() first"
        write_scratch_config(self.scratch, config)
        await control.load_model(self.scratch.name)

    async def restore(self, control: Any) -> None:
        if self.scratch is not None:
            try:
                await control.unload_model(self.scratch.name)
            finally:
                remove_scratch(self.scratch)


@dataclass
class ConfigOverride:
    """``model`` itself, reloaded with each point's configuration as a load override."""

    model: str
    model_path: Path
    #: what the server served before the sweep (its ``/config``); None when not loaded
    served: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def target(self) -> str:
        return self.model

    async def prepare(self, control: Any) -> None:
        try:
            self.served = dict(await control.get_model_config(self.model))
        except Exception:  # not loaded (or unknown): restore() leaves it unloaded
            self.served = None

    async def load(self, control: Any, config: ModelConfig) -> None:
        override = ModelConfig()
        override.CopyFrom(config)
        override.name = self.model
        await control.load_model(self.model, config=json.dumps(to_json_dict(override)))

    async def restore(self, control: Any) -> None:
        if self.served is None:
            await control.unload_model(self.model)
        else:
            await control.load_model(self.model, config=json.dumps(self.served))


def reconfiguration(model: str, model_dir: Path, repository: Path | None) -> Reconfiguration:
    """A scratch copy when the server's ``repository`` is reachable here, else overrides."""
    if repository is None:
        return ConfigOverride(model, model_dir)
    return ScratchCopy(model, model_dir, repository)


__all__ = ["ConfigOverride", "Reconfiguration", "ScratchCopy", "reconfiguration"]
