"""``ConfigEditor``: edit one model's ``config.pbtxt`` safely, with or without a kernel.

The editor holds a draft ``ModelConfig``. The form (``form``/``set``), the pbtxt text
(``pbtxt``) and ``config`` itself are three views of that one draft, so a change through any
of them shows in the others. ``apply()`` only writes a draft that the server's own validator
accepts *and* that fits the model file (``workbench.config.graph_checks``: Triton's
onnxruntime/libtorch load checks; a python model's ``auto_complete_config``) and every ensemble
of the repository that uses the model (``workbench.core.ensemble_validation``, the checks an
ensemble load runs). It writes atomically, keeps the previous file in a short history
(``history()``, ``revert(steps=n)``), reloads the model, and when the reload fails puts the
previous file back: the model that was serving keeps serving, and the error says why.

The file keeps its comments and layout wherever a top-level field did not change
(``workbench.config.pbtxt_patch``); ``warnings()`` says before writing what will not be kept.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from workbench.config import (
    Problem,
    detect_backend,
    is_ensemble,
    parse_pbtxt,
    read_config,
    to_pbtxt,
    validate,
)
from workbench.config.dtypes import config_to_wire
from workbench.config.graph_checks import model_file_problems
from workbench.config.pbtxt_patch import PatchedText, patch_pbtxt
from workbench.config.platforms import PYTHON_BACKEND, PYTHON_FILENAME
from workbench.core.ensemble_validation import ComposingModel, load_problems
from workbench.errors import ConfigError, InvalidArgumentError, UnavailableError, WorkbenchError
from workbench.notebook.form_fields import field_for_problem, get_value, read_form, set_value
from workbench.repository.atomic import Backup, atomic_write, backups, keep_backup
from workbench.repository.versions import select_versions, version_folders

#: where ``apply()`` keeps the previous file (older ones: ``history()``)
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
        #: the text that edits are written over: the file, or the text last given to ``pbtxt``
        self._base_text = self._read_text()
        self._config = parse_pbtxt(self._base_text, source=str(self.path))
        #: (key, problems) of the last ``auto_complete_config`` run
        self._auto_complete_cache: tuple[tuple[Any, ...], list[Problem]] | None = None
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
        """The draft as the text ``apply()`` writes: the file's own text, comments and layout
        kept, with each changed top-level field in canonical form. Assigning text parses it
        (``ConfigError`` if it does not parse) and makes it the text that is written."""
        return self.preview().text

    @pbtxt.setter
    def pbtxt(self, text: str) -> None:
        config = parse_pbtxt(text, source=f"{self.name}/config.pbtxt (editor)")
        self._base_text = text
        self.config = config

    def preview(self) -> PatchedText:
        """What ``apply()`` would write, with what of the current text it would not keep."""
        return patch_pbtxt(self._base_text, self._config)

    def warnings(self) -> list[str]:
        """What ``apply()`` would lose of the text: comments inside rewritten fields, or the
        whole layout when it cannot be kept (the file then stays in ``history()``)."""
        return _plan_warnings(self.preview())

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
        """Every problem in the draft; empty when it is valid.

        First the server's validator on the config alone; when it finds nothing, the draft
        against the model file (ONNX graph inputs and outputs, a TorchScript ``forward``'s
        input count, a python model's ``auto_complete_config`` called in this process as the
        server's load calls it) and against the repository's ensembles: each one that uses
        this model, and this model's own steps when it is an ensemble. An ensemble problem
        counts only when the draft brings it (one the file on disk has too is not this edit's).
        """
        problems = validate(self._config, model_name=self.name, model_path=self.model_dir)
        if problems:
            return problems
        return self._model_file_problems() + self._ensemble_problems()

    def _model_file_problems(self) -> list[Problem]:
        probe = ModelConfig()
        probe.CopyFrom(self._config)
        detect_backend(probe, self.model_dir)
        versions = [self.model_dir / str(v) for v in _versions(probe, self.model_dir)]
        problems = model_file_problems(probe, versions, model_name=self.name)
        if probe.backend == PYTHON_BACKEND and versions:
            problems += self._auto_complete_problems(probe, versions[-1])
        return problems

    def _auto_complete_problems(self, probe: ModelConfig, version_path: Path) -> list[Problem]:
        """What the model's own ``auto_complete_config`` refuses (the server's load runs the
        same in-process call); nothing when the file does not define one."""
        model_py = version_path / (probe.default_model_filename or PYTHON_FILENAME)
        if not _defines_auto_complete(model_py):
            return []
        stat = model_py.stat()
        key = (to_pbtxt(probe), str(model_py), stat.st_mtime_ns, stat.st_size)
        if self._auto_complete_cache is not None and self._auto_complete_cache[0] == key:
            return list(self._auto_complete_cache[1])
        from workbench.backends import get_backend

        trial = ModelConfig()
        trial.CopyFrom(probe)
        try:
            get_backend(PYTHON_BACKEND).auto_complete(trial, self.model_dir, version_path)
            problems = []
        except WorkbenchError as exc:
            problems = [Problem("auto_complete_config", str(exc))]
        self._auto_complete_cache = (key, problems)
        return list(problems)

    def _ensemble_problems(self) -> list[Problem]:
        repository, disk = self.model_dir.parent, _read_or_none(self.path)
        found = []
        if is_ensemble(self._config):
            own = disk if disk is not None and is_ensemble(disk) else None
            before = _ensemble_load_problems(repository, own, {}) if own else []
            after = _ensemble_load_problems(repository, self._config, {})
            found += [Problem("ensemble_scheduling", p) for p in after if p not in before]
        for name, ensemble in _ensembles_using(repository, self.name):
            before = _ensemble_load_problems(repository, ensemble, {self.name: disk})
            after = _ensemble_load_problems(repository, ensemble, {self.name: self._config})
            found += [Problem(f"used by ensemble '{name}'", p) for p in after if p not in before]
        return found

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
        """Unified diff from the file on disk to the text ``apply()`` would write ("" when
        equal). Comments and the layout of unchanged fields are kept, so only changes show."""
        lines = difflib.unified_diff(
            self._read_text().splitlines(keepends=True),
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
        """Validate, write ``config.pbtxt`` atomically, reload.

        The previous file goes into the history (``history()``) and to ``config.pbtxt.bak``.
        Invalid, or unfit for the model file or an ensemble that uses the model (see
        ``validate()``): ``ConfigError`` listing the problems, nothing written. Reload failed:
        the previous file is put back, the previous model keeps serving, and
        ``UnavailableError`` says why (the draft is kept, so it can be fixed and applied again).
        """
        problems = self.validate()
        if problems:
            listed = "; ".join(str(problem) for problem in problems)
            self.status = f"not applied: {listed}"
            self._notify()
            raise ConfigError(f"model '{self.name}': not applied, the draft is invalid: {listed}")
        plan = self.preview()
        previous = self.path.read_bytes()
        kept = keep_backup(self.path)
        atomic_write(self.backup_path, previous)
        atomic_write(self.path, plan.text)
        try:
            self._reload(self.name)
        except WorkbenchError as exc:
            atomic_write(self.path, previous)
            kept.path.unlink(missing_ok=True)
            self.status = f"reload failed, the previous configuration keeps serving: {exc}"
            self._notify()
            raise UnavailableError(
                f"model '{self.name}': the new configuration did not load; config.pbtxt was "
                f"restored and the previous configuration keeps serving. Reason: {exc}"
            ) from exc
        self._base_text = plan.text
        notes = "".join(f"; {warning}" for warning in _plan_warnings(plan))
        self.status = (
            f"applied and reloaded '{self.name}' (previous file kept as {kept.path.name}; "
            f"revert(steps=1) puts it back){notes}"
        )
        self._notify()

    @property
    def backup_path(self) -> Path:
        return self.path.with_name(self.path.name + BACKUP_SUFFIX)

    def history(self) -> list[Backup]:
        """Earlier versions of ``config.pbtxt``, newest first (the last ``BACKUP_HISTORY``);
        ``revert(steps=n)`` puts back ``history()[n - 1]``."""
        return backups(self.path)

    def revert(self, steps: int = 0) -> None:
        """``revert()``: drop the draft's changes, back to the file on disk.

        ``revert(steps=n)``: put back the file as it was ``n`` applies ago, byte for byte,
        through ``apply()`` (validated, written, reloaded; refused like any draft that would
        break the model or an ensemble). The current file goes into the history first, so a
        revert can itself be reverted.
        """
        if steps == 0:
            self._base_text = self._read_text()
            self._config.CopyFrom(parse_pbtxt(self._base_text, source=str(self.path)))
            self.input_errors.clear()
            self.status = "reverted to the file on disk"
            self._changed()
            return
        kept = self.history()
        if not 0 < steps <= len(kept):
            raise InvalidArgumentError(
                f"model '{self.name}': revert(steps={steps}) needs 0 (the file on disk) or 1 to "
                f"{len(kept)} (the earlier versions in history())"
            )
        self.input_errors.clear()
        self.pbtxt = kept[steps - 1].path.read_text(encoding="utf-8")
        self.apply()
        self.status = (
            f"reverted '{self.name}' to the file replaced at "
            f"{kept[steps - 1].saved_at:%Y-%m-%d %H:%M:%S} UTC and reloaded it"
        )
        self._notify()

    def _read_text(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {self.path}: {exc.strerror}") from None

    def _read_disk(self) -> ModelConfig:
        return parse_pbtxt(self._read_text(), source=str(self.path))

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


def _plan_warnings(plan: PatchedText) -> list[str]:
    found = []
    if plan.canonical:
        found.append(
            "the layout of config.pbtxt cannot be kept: apply() writes it in canonical form "
            "(the current file is kept in the history)"
        )
    if plan.lost_comments:
        found.append(
            f"comments inside {', '.join(plan.rewritten)} are not kept: "
            + "; ".join(plan.lost_comments)
        )
    return found


def _defines_auto_complete(model_py: Path) -> bool:
    """Whether ``TritonPythonModel`` in the file defines ``auto_complete_config`` (read, not
    run: a file without one is never imported for a check)."""
    try:
        tree = ast.parse(model_py.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(
        isinstance(node, ast.ClassDef)
        and node.name == "TritonPythonModel"
        and any(
            isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            and item.name == "auto_complete_config"
            for item in node.body
        )
        for node in tree.body
    )


# -- the ensembles of the repository, from the files on disk ---------------------------------------
def _read_or_none(path: Path) -> ModelConfig | None:
    try:
        return read_config(path)
    except WorkbenchError:
        return None


def _versions(config: ModelConfig, model_dir: Path) -> list[int]:
    """The versions ``config``'s policy loads from ``model_dir`` ([] when none would)."""
    try:
        return select_versions(config, version_folders(model_dir), model_name=model_dir.name)
    except (InvalidArgumentError, OSError):
        return []


def _ensembles_using(repository: Path, name: str) -> Iterator[tuple[str, ModelConfig]]:
    for folder in sorted(repository.iterdir()):
        if folder.name.startswith(".") or folder.name == name or not folder.is_dir():
            continue
        config = _read_or_none(folder / "config.pbtxt")
        steps = config.ensemble_scheduling.step if config is not None else []
        if config is not None and is_ensemble(config) and any(s.model_name == name for s in steps):
            yield folder.name, config


def _ensemble_load_problems(
    repository: Path, ensemble: ModelConfig, overrides: dict[str, ModelConfig | None]
) -> list[str]:
    """``load_problems`` of ``ensemble`` with its step models as on disk, but ``overrides``."""
    composing = {}
    for step in ensemble.ensemble_scheduling.step:
        name, folder = step.model_name, repository / step.model_name
        config = overrides[name] if name in overrides else _read_or_none(folder / "config.pbtxt")
        versions = _versions(config, folder) if config is not None else []
        composing[name] = ComposingModel(config is not None, config, versions)
    return load_problems(ensemble, composing)


__all__ = ["BACKUP_SUFFIX", "ConfigEditor"]
