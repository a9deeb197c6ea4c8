"""Model configuration through Triton's own protobuf schema."""

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config.defaults import BACKEND_DEFAULTS, detect_backend, fill_defaults
from workbench.config.model_config import (
    backend_name,
    from_json,
    is_ensemble,
    parse_pbtxt,
    read_config,
    to_json_dict,
    to_pbtxt,
    write_config,
)
from workbench.config.validation import Problem, check, validate

__all__ = [
    "BACKEND_DEFAULTS",
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
