"""The on-disk model repository: models, numeric versions, version policy, polling, writes;
remote roots (``s3://``, ``gs://``, ``as://``) are read through a local copy.

Layer 1: imports only ``workbench.errors``, ``workbench._types``, ``workbench.config`` and
Triton's generated ``model_config_pb2`` (and s3fs/gcsfs/adlfs inside the function that opens
a remote root).
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
from workbench.repository.remote_url import RemoteUrl, is_remote_url, parse_remote_url
from workbench.repository.versions import parse_version_folder, select_versions

__all__ = [
    "CONFIG_FILENAME",
    "CUSTOM_CONFIG_FOLDER",
    "ModelRepository",
    "RemoteUrl",
    "RepositoryChanges",
    "atomic_write",
    "diff_snapshots",
    "fingerprint",
    "is_remote_url",
    "parse_remote_url",
    "parse_version_folder",
    "select_versions",
    "validate_model_name",
]
