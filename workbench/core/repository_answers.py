"""What the repository API answers, as tritonserver 2.51 does: the index's entries, and the
error of a failed load."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workbench.core.lifecycle import ModelRecord, ModelState
from workbench.errors import ConfigError, InternalError, InvalidArgumentError, WorkbenchError


def index_entries(
    names: Sequence[str], record_of: Callable[[str], ModelRecord | None], ready_only: bool = False
) -> list[dict[str, Any]]:
    """The index of the models ``names`` (the repository's folders: a model loaded from
    ``file:`` contents, or still serving after its folder went, is not listed)."""
    entries = [entry for name in names for entry in _entries(name, record_of(name))]
    if ready_only:
        entries = [e for e in entries if e.get("state") == ModelState.READY.value]
    return entries


def _entries(name: str, record: ModelRecord | None) -> list[dict[str, Any]]:
    if record is None or record.state is None:
        return [{"name": name}]
    if record.versions:
        return [
            {"name": name, "version": str(v), "state": "READY"} for v in sorted(record.versions)
        ]
    state = record.state.value
    # tritonserver 2.51 lists an unloading model without a reason
    reason = {} if record.state is ModelState.UNLOADING else {"reason": record.reason}
    if record.retired:
        return [{"name": name, "version": str(v), "state": state, **reason} for v in record.retired]
    return [{"name": name, "state": state, **reason}]


def load_error(name: str, error: WorkbenchError) -> WorkbenchError:
    """What Triton 2.51 answers to a failed repository load (the reason is in the index).

    A configuration it cannot accept fails its repository poll (500); a model that fails
    while loading answers 400 ``load failed for model '<name>': ...`` with a trailing newline.
    """
    if isinstance(error, ConfigError):
        return InternalError(f"failed to load '{name}', failed to poll from model repository")
    return InvalidArgumentError(f"load failed for model '{name}': {error}\n")


__all__ = ["index_entries", "load_error"]
