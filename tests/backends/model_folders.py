"""Helpers for backend tests: model folders in ``tmp_path`` and direct instance contexts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from workbench._types import Tensor
from workbench.backends.base import InstanceContext
from workbench.config.dtypes import wire_from_numpy
from workbench.core.request import InferRequest


def write_model(root: Path, name: str, pbtxt: str, files: dict[str, str | bytes]) -> Path:
    """Create ``root/name`` with ``config.pbtxt`` and ``files`` (paths relative to it)."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(textwrap.dedent(pbtxt))
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(textwrap.dedent(content))
    return folder


def load_config(folder: Path) -> model_config_pb2.ModelConfig:
    config = model_config_pb2.ModelConfig()
    text_format.Parse((folder / "config.pbtxt").read_text(), config)
    if not config.name:
        config.name = folder.name
    return config


def context_for(folder: Path, version: int = 1, **kwargs: object) -> InstanceContext:
    config = kwargs.pop("config", None) or load_config(folder)
    return InstanceContext(
        model_name=config.name,  # type: ignore[union-attr]
        model_version=version,
        config=config,  # type: ignore[arg-type]
        model_path=folder,
        version_path=folder / str(version),
        instance_name=f"{config.name}_0_0",  # type: ignore[union-attr]
        **kwargs,  # type: ignore[arg-type]
    )


def request(
    inputs: dict[str, np.ndarray | Tensor],
    requested: list[str] | None = None,
    request_id: str = "",
    **parameters: object,
) -> InferRequest:
    tensors = {
        name: value
        if isinstance(value, Tensor)
        else Tensor(name, wire_from_numpy(value.dtype), value)
        for name, value in inputs.items()
    }
    return InferRequest(
        model_name="m",
        id=request_id,
        inputs=tensors,
        requested_outputs=requested,
        parameters=dict(parameters),
    )
