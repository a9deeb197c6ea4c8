"""The settings people tune, as form fields over a ``ModelConfig``.

Each field is named by its Triton field path (``dynamic_batching.max_queue_delay_microseconds``)
so that a validator problem about that path lands next to it. Reading a field never changes the
configuration; writing one goes through the generated protobuf class, so a value the schema
cannot hold (a negative ``uint64``, an unknown enum name) is refused with the field named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from workbench.errors import InvalidArgumentError

#: form value kinds
INT, BOOL, CHOICE, INT_LIST, ROWS = "int", "bool", "choice", "int_list", "rows"

INSTANCE_KINDS = tuple(ModelInstanceGroup.Kind.keys())
VERSION_POLICIES = ("latest", "all", "specific")
TIMEOUT_ACTIONS = ("REJECT", "DELAY")


@dataclass(frozen=True)
class FormField:
    """One control of the editor form: its Triton path, label, value kind and choices."""

    path: str
    label: str
    kind: str
    choices: tuple[str, ...] = ()
    #: the field only applies while this boolean field is on (e.g. dynamic batching enabled)
    enabled_by: str = ""


_BATCHING = "dynamic_batching"
_QUEUE = "dynamic_batching.default_queue_policy"

FIELDS: tuple[FormField, ...] = (
    FormField("max_batch_size", "max_batch_size", INT),
    FormField(_BATCHING, "dynamic batching", BOOL),
    FormField(
        f"{_BATCHING}.max_queue_delay_microseconds", "max_queue_delay_us", INT, (), _BATCHING
    ),
    FormField(
        f"{_BATCHING}.preferred_batch_size", "preferred_batch_size", INT_LIST, enabled_by=_BATCHING
    ),
    FormField(f"{_BATCHING}.priority_levels", "priority_levels", INT, enabled_by=_BATCHING),
    FormField(f"{_BATCHING}.default_priority_level", "default_priority", INT, enabled_by=_BATCHING),
    FormField(
        f"{_QUEUE}.timeout_action", "timeout_action", CHOICE, TIMEOUT_ACTIONS, enabled_by=_BATCHING
    ),
    FormField(
        f"{_QUEUE}.default_timeout_microseconds", "default_timeout_us", INT, enabled_by=_BATCHING
    ),
    FormField(
        f"{_QUEUE}.allow_timeout_override", "allow_timeout_override", BOOL, enabled_by=_BATCHING
    ),
    FormField(f"{_QUEUE}.max_queue_size", "max_queue_size", INT, enabled_by=_BATCHING),
    FormField("instance_group", "instance_group", ROWS),
    FormField("version_policy", "version_policy", CHOICE, VERSION_POLICIES),
    FormField("version_policy.latest.num_versions", "num_versions", INT),
    FormField("version_policy.specific.versions", "versions", INT_LIST),
    FormField("response_cache.enable", "response cache", BOOL),
)

FIELDS_BY_PATH: dict[str, FormField] = {field.path: field for field in FIELDS}


def read_form(config: ModelConfig) -> dict[str, Any]:
    """Every form field's value in ``config`` (defaults where a field is unset)."""
    return {field.path: get_value(config, field.path) for field in FIELDS}


def get_value(config: ModelConfig, path: str) -> Any:
    """The value of form field ``path``; see ``FIELDS``."""
    special = _SPECIAL_GETTERS.get(path)
    if special is not None:
        return special(config)
    message, field = _resolve(config, path)
    value = getattr(message, field.name)
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    if _is_repeated(field):
        return list(value)
    return value


def set_value(config: ModelConfig, path: str, value: Any) -> None:
    """Write form field ``path``; raises ``InvalidArgumentError`` naming it on a bad value."""
    form_field = FIELDS_BY_PATH.get(path)
    if form_field is None:
        known = ", ".join(FIELDS_BY_PATH)
        raise InvalidArgumentError(f"'{path}' is not a form field; the form has: {known}")
    coerced = coerce(form_field, value)
    special = _SPECIAL_SETTERS.get(path)
    if special is not None:
        special(config, coerced)
        return
    message, field = _resolve(config, path)
    try:
        if field.enum_type is not None:
            setattr(message, field.name, field.enum_type.values_by_name[coerced].number)
        elif _is_repeated(field):
            del getattr(message, field.name)[:]
            getattr(message, field.name).extend(coerced)
        else:
            setattr(message, field.name, coerced)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"{path}: {exc}") from None


def coerce(field: FormField, value: Any) -> Any:
    """``value`` as the field's kind: ints from text, ``"4, 8"`` as ``[4, 8]``, known choices."""
    if field.kind == INT:
        return _to_int(field.path, value)
    if field.kind == BOOL:
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{field.path}: expected true or false, got {value!r}")
        return value
    if field.kind == CHOICE:
        if value not in field.choices:
            raise InvalidArgumentError(
                f"{field.path}: expected one of {', '.join(field.choices)}, got {value!r}"
            )
        return value
    if field.kind == INT_LIST:
        return _to_int_list(field.path, value)
    return [_instance_row(index, row) for index, row in enumerate(_sequence(field.path, value))]


def _to_int(path: str, value: Any) -> int:
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{path}: expected a whole number, got {value!r}")
    try:
        return int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{path}: expected a whole number, got {value!r}") from None


def _to_int_list(path: str, value: Any) -> list[int]:
    if isinstance(value, str):
        value = [part for part in value.replace(",", " ").split() if part]
    try:
        return [_to_int(path, item) for item in _sequence(path, value)]
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"{path}: expected whole numbers separated by commas, got {value!r}"
        ) from None


def _sequence(path: str, value: Any) -> Sequence[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise InvalidArgumentError(f"{path}: expected a list, got {value!r}")
    return value


def _instance_row(index: int, row: Any) -> dict[str, Any]:
    """One ``instance_group`` row: ``count``, ``kind`` and ``gpus`` (missing keys: defaults)."""
    path = f"instance_group[{index}]"
    if not isinstance(row, Mapping):
        raise InvalidArgumentError(f"{path}: expected a mapping with count, kind, gpus")
    unknown = set(row) - {"count", "kind", "gpus"}
    if unknown:
        raise InvalidArgumentError(f"{path}: unknown keys {sorted(unknown)}; use count, kind, gpus")
    kind = row.get("kind", "KIND_AUTO")
    if kind not in INSTANCE_KINDS:
        raise InvalidArgumentError(
            f"{path}.kind: expected one of {', '.join(INSTANCE_KINDS)}, got {kind!r}"
        )
    return {
        "count": _to_int(f"{path}.count", row.get("count", 1)),
        "kind": kind,
        "gpus": _to_int_list(f"{path}.gpus", row.get("gpus", [])),
    }


# -- fields that are not a plain path -----------------------------------------------------------
def _get_batching(config: ModelConfig) -> bool:
    return config.HasField("dynamic_batching")


def _set_batching(config: ModelConfig, enabled: bool) -> None:
    if enabled:
        config.dynamic_batching.SetInParent()
    else:
        config.ClearField("dynamic_batching")


def _get_policy(config: ModelConfig) -> str:
    # Triton's default (no version_policy) is the latest version.
    return config.version_policy.WhichOneof("policy_choice") or "latest"


def _set_policy(config: ModelConfig, choice: str) -> None:
    if choice == _get_policy(config):
        return
    if choice == "latest":
        config.version_policy.latest.num_versions = 1
    elif choice == "all":
        config.version_policy.all.SetInParent()
    else:
        config.version_policy.specific.SetInParent()


def _get_num_versions(config: ModelConfig) -> int:
    policy = config.version_policy
    return policy.latest.num_versions if policy.HasField("latest") else 1


def _get_rows(config: ModelConfig) -> list[dict[str, Any]]:
    return [
        {
            "count": group.count,
            "kind": ModelInstanceGroup.Kind.Name(group.kind),
            "gpus": list(group.gpus),
        }
        for group in config.instance_group
    ]


def _set_rows(config: ModelConfig, rows: list[dict[str, Any]]) -> None:
    """Rows replace groups by position; a kept group keeps its other fields (name, profile)."""
    groups = config.instance_group
    while len(groups) > len(rows):
        del groups[len(groups) - 1]
    for index, row in enumerate(rows):
        group = groups[index] if index < len(groups) else groups.add()
        group.count = row["count"]
        group.kind = ModelInstanceGroup.Kind.Value(row["kind"])
        del group.gpus[:]
        group.gpus.extend(row["gpus"])


_SPECIAL_GETTERS: dict[str, Callable[[ModelConfig], Any]] = {
    _BATCHING: _get_batching,
    "version_policy": _get_policy,
    "version_policy.latest.num_versions": _get_num_versions,
    "instance_group": _get_rows,
}
_SPECIAL_SETTERS: dict[str, Callable[[ModelConfig, Any], None]] = {
    _BATCHING: _set_batching,
    "version_policy": _set_policy,
    "instance_group": _set_rows,
}


def _resolve(config: ModelConfig, path: str) -> tuple[Message, FieldDescriptor]:
    """The message holding the last part of ``path`` and that field's descriptor."""
    message: Message = config
    *parents, leaf = path.split(".")
    for part in parents:
        message = getattr(message, part)
    return message, message.DESCRIPTOR.fields_by_name[leaf]


def _is_repeated(field: FieldDescriptor) -> bool:
    is_repeated = getattr(field, "is_repeated", None)
    if is_repeated is not None:
        return bool(is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def field_for_problem(problem_field: str) -> str:
    """The form field a validator problem belongs next to (``""``: none, show it at the top).

    ``instance_group[1].count`` belongs to the ``instance_group`` rows; a problem about a
    sub-field without its own control goes to the nearest enclosing one.
    """
    path = (
        problem_field.split("[", 1)[0]
        if problem_field.startswith("instance_group")
        else (problem_field)
    )
    while path:
        if path in FIELDS_BY_PATH:
            return path
        path = path.rpartition(".")[0]
    return ""


__all__ = [
    "FIELDS",
    "FIELDS_BY_PATH",
    "FormField",
    "field_for_problem",
    "get_value",
    "read_form",
    "set_value",
]
