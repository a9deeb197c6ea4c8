"""Read and write ``config.pbtxt`` and Triton's JSON form of a model configuration.

Everything goes through Triton's generated ``inference.ModelConfig`` class and protobuf's own
``text_format``/``json_format``; nothing here knows the schema by hand.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench._types import StrPath
from workbench.config.platforms import backend_name, is_ensemble
from workbench.errors import ConfigError

__all__ = [
    "ModelConfig",
    "backend_name",
    "from_json",
    "is_ensemble",
    "parse_pbtxt",
    "read_config",
    "to_json_dict",
    "to_pbtxt",
    "write_config",
]

#: 64-bit integer fields that real Triton 2.51 still prints as JSON strings: its
#: ``ModelConfigToJson`` fixes a hand-written list of fields and misses these. The first is
#: verified against tritonserver 2.51 ``GET /v2/models/{m}/config``; the rest are read from
#: that function's source (core/src/model_config_utils.cc).
TRITON_STRING_INT64_FIELDS = frozenset(
    {
        "sequence_batching.state.initial_state.dims",
        "optimization.cuda.graph_spec.input.dim",
        "optimization.cuda.graph_spec.graph_lower_bound.input.dim",
        "instance_group.secondary_devices.device_id",
    }
)

_INT64_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)

# protobuf 5.26 renamed ``including_default_value_fields``; support both spellings.
_PRINT_DEFAULTS = (
    "always_print_fields_with_no_presence"
    if "always_print_fields_with_no_presence"
    in inspect.signature(json_format.MessageToDict).parameters
    else "including_default_value_fields"
)


def parse_pbtxt(text: str, *, source: str = "<string>") -> ModelConfig:
    """Parse protobuf text format into a ``ModelConfig``.

    Raises ``ConfigError`` naming ``source``, line and column on a syntax error or an unknown
    field, e.g. ``model_repository/m/config.pbtxt:3:7: ...``.
    """
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ConfigError(_located_message(exc, source)) from None
    return config


def _located_message(exc: text_format.ParseError, source: str) -> str:
    message = str(exc)
    line, column = exc.GetLine(), exc.GetColumn()
    if line is None:
        return f"{source}: {message}"
    # protobuf already prefixes "line:column : "; replace it with the compiler-style form.
    prefix = f"{line}:{column} : "
    message = message.removeprefix(prefix)
    return f"{source}:{line}:{column}: {message}"


def read_config(path: StrPath) -> ModelConfig:
    """Read and parse a ``config.pbtxt`` file.

    Bytes that are not UTF-8 are read as the server's repository reads them
    (``ModelRepository.read_config_at``): Triton takes them in comments and string values, so
    they become U+FFFD there; anywhere else they fail the parse with a ``ConfigError``.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read model configuration {path}: {exc.strerror}") from None
    return parse_pbtxt(text, source=str(path))


def to_pbtxt(config: ModelConfig) -> str:
    """Protobuf text format, fields in schema order, so equal configs give equal text."""
    return str(text_format.MessageToString(config, as_utf8=True))


def write_config(config: ModelConfig, path: StrPath, *, backup: bool = True) -> None:
    """Write ``config`` atomically (temp file in the same folder, then ``os.replace``).

    With ``backup`` the previous file is kept next to it as ``config.pbtxt.bak``.
    """
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as tmp:
            tmp.write(to_pbtxt(config))
            tmp.flush()
            os.fsync(tmp.fileno())
        os.chmod(tmp_name, _file_mode(path))
        if backup and path.exists():
            shutil.copy2(path, path.with_name(path.name + ".bak"))
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def _file_mode(path: Path) -> int:
    """Keep the mode of the file being replaced (``mkstemp`` makes 0o600); new files get 0o644.

    Reading the umask would mean setting it, which races with other threads.
    """
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return 0o644


def to_json_dict(config: ModelConfig) -> dict[str, Any]:
    """The configuration as Triton's ``GET /v2/models/{m}/config`` renders it.

    Proto field names, enums by name, fields without presence printed even when default, keys
    in schema order, and 64-bit integers as JSON numbers (protobuf prints them as strings;
    Triton converts them back, except ``TRITON_STRING_INT64_FIELDS``).
    """
    data = json_format.MessageToDict(
        config, preserving_proto_field_name=True, **{_PRINT_DEFAULTS: True}
    )
    return _fix_message(data, config.DESCRIPTOR, "")


def _fix_message(data: dict[str, Any], descriptor: Descriptor, path: str) -> dict[str, Any]:
    """Reorder ``data`` by schema order and turn 64-bit integer strings into numbers."""
    fixed: dict[str, Any] = {}
    for field in descriptor.fields:
        if field.name in data:
            field_path = f"{path}.{field.name}" if path else field.name
            fixed[field.name] = _fix_field(data[field.name], field, field_path)
    return fixed


def _fix_field(value: Any, field: FieldDescriptor, path: str) -> Any:
    if _is_map(field):
        value_field = field.message_type.fields_by_name["value"]
        return {key: _fix_value(item, value_field, path) for key, item in value.items()}
    if _is_repeated(field):
        return [_fix_value(item, field, path) for item in value]
    return _fix_value(value, field, path)


def _fix_value(value: Any, field: FieldDescriptor, path: str) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return _fix_message(value, field.message_type, path)
    if field.type in _INT64_TYPES and path not in TRITON_STRING_INT64_FIELDS:
        return int(value)
    return value


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf >= 5.29 has ``is_repeated`` and 7 dropped ``label``; older ones only ``label``.
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _is_map(field: FieldDescriptor) -> bool:
    message_type = field.message_type
    return message_type is not None and message_type.GetOptions().map_entry


def from_json(data: str | Mapping[str, Any]) -> ModelConfig:
    """Parse Triton's JSON form (a string or an already decoded dict) into a ``ModelConfig``.

    64-bit integers may be numbers or strings. Unknown fields and bad values raise
    ``ConfigError``.
    """
    if isinstance(data, str):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"model configuration is not valid JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise ConfigError("model configuration JSON must be an object")
    config = ModelConfig()
    try:
        json_format.ParseDict(dict(data), config)
    except json_format.ParseError as exc:
        # The first line says what is wrong; protobuf appends a long list of valid fields.
        first_line = str(exc).splitlines()[0]
        raise ConfigError(f"invalid model configuration JSON: {first_line}") from None
    return config
