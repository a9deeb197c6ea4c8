"""Model configuration through Triton's own protobuf schema."""

from __future__ import annotations

from workbench.config.defaults import detect_backend, fill_defaults
from workbench.config.model_config import (
    ModelConfig,
    from_json,
    parse_pbtxt,
    read_config,
    to_json_dict,
    to_pbtxt,
    write_config,
)
from workbench.config.platforms import backend_name, is_ensemble
from workbench.config.validation import Problem, check, validate

__all__ = [
    "ModelConfig",
    "Problem",
    "backend_name",
    "check",
    "detect_backend",
    "fill_defaults",
    "from_json",
    "is_ensemble",
    "parse_pbtxt",
    "read_config",
    "to_json_dict",
    "to_pbtxt",
    "validate",
    "write_config",
]
