"""The on-disk model repository: models, numeric versions, version policy, polling, writes.

Layer 1: imports only ``workbench.errors``, ``workbench._types``, ``workbench.config`` and
Triton's generated ``model_config_pb2``.
"""

from __future__ import annotations

from workbench.repository.atomic import atomic_write
from workbench.repository.model_repository import (
    CONFIG_FILENAME,
    CUSTOM_CONFIG_FOLDER,
    ModelRepository,
    validate_model_name,
)
from workbench.repository.poll import RepositoryChanges, diff_snapshots, fingerprint
from workbench.repository.versions import parse_version_folder, select_versions

__all__ = [
    "CONFIG_FILENAME",
    "CUSTOM_CONFIG_FOLDER",
    "ModelRepository",
    "RepositoryChanges",
    "atomic_write",
    "diff_snapshots",
    "fingerprint",
    "parse_version_folder",
    "select_versions",
    "validate_model_name",
]
