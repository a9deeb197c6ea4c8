"""``ConfigEditor``: edit one model's ``config.pbtxt`` safely, with or without a kernel.

The editor holds a draft ``ModelConfig``. The form (``form``/``set``), the pbtxt text
(``pbtxt``) and ``config`` itself are three views of that one draft, so a change through any
of them shows in the others. ``apply()`` only writes a draft that the server's own validator
accepts, writes it atomically with a backup, reloads the model, and when the reload fails puts
the previous file back: the model that was serving keeps serving, and the error says why.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config import Problem, parse_pbtxt, to_pbtxt, validate, write_config
from workbench.config.dtypes import config_to_wire
from workbench.errors import ConfigError, UnavailableError, WorkbenchError
from workbench.notebook.form_fields import field_for_problem, get_value, read_form, set_value
from workbench.repository.atomic import atomic_write

#: where ``apply()`` keeps the previous file
BACKUP_SUFFIX = ".bak"

Listener = Callable[["ConfigEditor"], None]


class ConfigEditor:
    """Edit ``<model_dir>/config.pbtxt``; ``reload(name)`` asks the server to load it again.

    ``reload`` raises a ``WorkbenchError`` carrying the server's reason when the load fails;
    ``Workbench.edit()`` passes its ``load``.
    """

    def __init__(self, name: str, model_dir: Path, reload: Callable[[str], None]) -> None:
        self.name = name
        self.model_dir = Path(model_dir)
        self.path = self.model_dir / "config.pbtxt"
        self._reload = reload
        self._config = self._read_disk()
        #: per form field, why the last value given for it was refused
        self.input_errors: dict[str, str] = {}
        #: what the last apply/revert did, or why it failed (shown in the widget)
        self.status = ""
        self._listeners: list[Listener] = []
        self._seen = to_pbtxt(self._config)
        self._view: Any = None

    # -- the draft, three ways ------------------------------------------------------------------
    @property
    def config(self) -> ModelConfig:
        """The draft being edited; change it in place or assign a new ``ModelConfig``."""
        return self._config

    @config.setter
    def config(self, config: ModelConfig) -> None:
        if not isinstance(config, ModelConfig):
            raise ConfigError(f"expected a ModelConfig, got {type(config).__name__}")
        self._config.CopyFrom(config)
        self.input_errors.clear()
        self._changed()

    @property
    def pbtxt(self) -> str:
        """The draft in protobuf text format; assigning text parses it (``ConfigError`` if not)."""
        return to_pbtxt(self._config)

    @pbtxt.setter
    def pbtxt(self, text: str) -> None:
        self.config = parse_pbtxt(text, source=f"{self.name}/config.pbtxt (editor)")

    @property
    def form(self) -> dict[str, Any]:
        """The form's values, by Triton field path (see ``workbench.notebook.form_fields``)."""
        return read_form(self._config)

    def get(self, path: str) -> Any:
        """One form value."""
        return get_value(self._config, path)

    def set(self, path: str, value: Any) -> None:
        """Set one form field, as the widget does; a value it cannot take raises and is kept
        in ``input_errors`` (shown next to the field) while the draft stays unchanged."""
        trial = ModelConfig()
        trial.CopyFrom(self._config)
        try:
            set_value(trial, path, value)
        except WorkbenchError as exc:
            self.input_errors[path] = str(exc)
            self._notify()
            raise
        self.input_errors.pop(path, None)
        self._config.CopyFrom(trial)
        self._changed()

    def inputs_outputs(self) -> list[dict[str, Any]]:
        """The model's tensors (read-only in the form): io, name, data type and dims."""
        return [
            {
                "io": io,
                "name": t.name,
                "datatype": config_to_wire(t.data_type),
                "dims": list(t.dims),
            }
            for io, tensors in (("input", self._config.input), ("output", self._config.output))
            for t in tensors
        ]

    # -- checks and comparison ----------------------------------------------------------------
    def validate(self) -> list[Problem]:
        """Every problem the server's validator finds in the draft; empty when it is valid."""
        return validate(self._config, model_name=self.name, model_path=self.model_dir)

    def messages(self) -> dict[str, list[str]]:
        """Problems and refused inputs by form field; key ``""`` holds the rest."""
        grouped: dict[str, list[str]] = {}
        for path, error in self.input_errors.items():
            grouped.setdefault(path, []).append(error)
        for problem in self.validate():
            key = field_for_problem(problem.field)
            text = problem.message if key == problem.field else str(problem)
            grouped.setdefault(key, []).append(text)
        return grouped

    def diff(self) -> str:
        """Unified diff from the file on disk to the draft ("" when equal).

        Both sides are in canonical text format, so only changed settings show; note that
        ``apply()`` writes that canonical form (hand formatting and comments are not kept).
        """
        disk = to_pbtxt(self._read_disk())
        lines = difflib.unified_diff(
            disk.splitlines(keepends=True),
            self.pbtxt.splitlines(keepends=True),
            fromfile=f"{self.name}/config.pbtxt (disk)",
            tofile=f"{self.name}/config.pbtxt (editor)",
        )
        return "".join(lines)

    @property
    def dirty(self) -> bool:
        """Whether the draft differs from the file on disk."""
        return self._read_disk() != self._config

    # -- apply / revert -------------------------------------------------------------------------
    def apply(self) -> None:
        """Validate, write ``config.pbtxt`` atomically (previous file kept as ``.bak``), reload.

        Invalid: ``ConfigError`` listing the problems, nothing written. Reload failed: the
        previous file is put back, the previous model keeps serving, and ``UnavailableError``
        says why (the draft is kept, so it can be fixed and applied again).
        """
        problems = self.validate()
        if problems:
            listed = "; ".join(str(problem) for problem in problems)
            self.status = f"not applied: {listed}"
            self._notify()
            raise ConfigError(f"model '{self.name}': not applied, the draft is invalid: {listed}")
        previous = self.path.read_bytes()
        write_config(self._config, self.path, backup=True)
        try:
            self._reload(self.name)
        except WorkbenchError as exc:
            atomic_write(self.path, previous)
            self.status = f"reload failed, the previous configuration keeps serving: {exc}"
            self._notify()
            raise UnavailableError(
                f"model '{self.name}': the new configuration did not load; config.pbtxt was "
                f"restored and the previous configuration keeps serving. Reason: {exc}"
            ) from exc
        self.status = f"applied and reloaded '{self.name}' (previous file: {self.backup_path})"
        self._notify()

    @property
    def backup_path(self) -> Path:
        return self.path.with_name(self.path.name + BACKUP_SUFFIX)

    def revert(self) -> None:
        """Drop the draft's changes: back to the file on disk."""
        self._config.CopyFrom(self._read_disk())
        self.input_errors.clear()
        self.status = "reverted to the file on disk"
        self._changed()

    def _read_disk(self) -> ModelConfig:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {self.path}: {exc.strerror}") from None
        return parse_pbtxt(text, source=str(self.path))

    # -- change notification ---------------------------------------------------------------------
    def observe(self, listener: Listener) -> None:
        """Call ``listener(editor)`` after every change (the widget view subscribes)."""
        self._listeners.append(listener)

    def sync(self) -> bool:
        """Tell listeners if the draft was changed in place since they last heard of it."""
        if to_pbtxt(self._config) == self._seen:
            return False
        self._changed()
        return True

    def _changed(self) -> None:
        self._seen = to_pbtxt(self._config)
        self._notify()

    def _notify(self) -> None:
        for listener in list(self._listeners):
            listener(self)

    # -- display ---------------------------------------------------------------------------------
    def widget(self) -> Any:
        """The ipywidgets view (needs ``pip install 'triton-workbench[notebook]'``)."""
        from workbench.notebook.editor_view import ConfigEditorView

        if self._view is None:
            self._view = ConfigEditorView(self)
        return self._view.root

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        try:
            root = self.widget()
        except WorkbenchError:
            return {"text/plain": repr(self)}
        return root._repr_mimebundle_(**kwargs)

    def __repr__(self) -> str:
        state = "modified" if self.dirty else "same as disk"
        return f"ConfigEditor('{self.name}', {state})\n{self.pbtxt}"


__all__ = ["BACKUP_SUFFIX", "ConfigEditor"]
