"""The facade's model table: one row per version in the repository index, with its config.

Plain rows (no pandas) so that ``Workbench``'s rich display needs nothing more; ``models()``
turns them into a DataFrame.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config import backend_name, read_config
from workbench.errors import WorkbenchError
from workbench.notebook.triton_http import TritonHttp

MODEL_COLUMNS = ("name", "version", "state", "backend", "platform", "max_batch_size", "reason")


def model_rows(http: TritonHttp, model_dir: Callable[[str], Path]) -> list[dict[str, Any]]:
    """name, version, state, backend, platform, max_batch_size, reason per index entry."""
    rows = []
    for entry in http.index():
        name = entry["name"]
        config = _config(http, model_dir, name, entry.get("state") == "READY")
        rows.append(
            {
                "name": name,
                "version": entry.get("version", ""),
                "state": entry.get("state", ""),
                "backend": backend_name(config) if config is not None else "",
                "platform": config.platform if config is not None else "",
                "max_batch_size": config.max_batch_size if config is not None else None,
                "reason": entry.get("reason", ""),
            }
        )
    return rows


def _config(
    http: TritonHttp, model_dir: Callable[[str], Path], name: str, ready: bool
) -> ModelConfig | None:
    """The served config, else the one on disk (a model that failed to load has none)."""
    try:
        return http.config(name) if ready else read_config(model_dir(name) / "config.pbtxt")
    except WorkbenchError:
        return None


__all__ = ["MODEL_COLUMNS", "model_rows"]
