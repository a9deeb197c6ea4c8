"""The ipywidgets view of a ``ConfigEditor``: form, pbtxt text, diff, Apply and Revert, and
a list of earlier versions of the file with a Restore button (``revert(steps=n)``).

A thin view: every user action calls the controller, and every controller change (including
``editor.config`` edited in place by a notebook cell, picked up after the cell runs) refreshes
the widgets. ``_updating`` stops the refresh from feeding back into the controller.
"""

from __future__ import annotations

import html
import weakref
from typing import TYPE_CHECKING, Any

from workbench.errors import MissingDependencyError, WorkbenchError
from workbench.notebook.form_fields import (
    BOOL,
    CHOICE,
    FIELDS,
    INSTANCE_KINDS,
    INT,
    FormField,
)

if TYPE_CHECKING:
    from workbench.notebook.config_editor import ConfigEditor

_ERROR_STYLE = "color:#b00020;font-size:90%"
_WARNING_STYLE = "color:#8a5300;font-size:90%"


def _widgets() -> Any:
    try:
        import ipywidgets
    except ImportError:
        raise MissingDependencyError("ipywidgets", "notebook") from None
    return ipywidgets


def _error_html(messages: list[str], style: str = _ERROR_STYLE) -> str:
    return "".join(f'<div style="{style}">{html.escape(m)}</div>' for m in messages)


def _ints_text(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


class ConfigEditorView:
    """Widgets over one ``ConfigEditor``; ``root`` is what a notebook displays."""

    def __init__(self, editor: ConfigEditor) -> None:
        self.w = _widgets()
        self.editor = editor
        self._updating = False
        self.controls: dict[str, Any] = {}
        self.field_messages: dict[str, Any] = {}
        self.rows_box = self.w.VBox()
        self.pbtxt = self.w.Textarea(
            layout=self.w.Layout(width="100%", height="320px"), continuous_update=False
        )
        self.pbtxt_message = self.w.HTML()
        self.diff = self.w.HTML()
        self.messages = self.w.HTML()
        self.warnings = self.w.HTML()
        self.status = self.w.HTML()
        self.apply_button = self.w.Button(description="Apply", button_style="primary")
        self.revert_button = self.w.Button(description="Revert")
        self.history = self.w.Dropdown(description="earlier", options=[])
        self.restore_button = self.w.Button(description="Restore")
        self.root = self._layout()
        self._connect()
        editor.observe(self._on_editor_change)
        _sync_after_each_cell(editor)
        self.refresh()

    # -- building --------------------------------------------------------------------------
    def _layout(self) -> Any:
        w = self.w
        form = w.VBox([self._field_row(field) for field in FIELDS] + [self._io_table()])
        tabs = w.Tab(children=[form, w.VBox([self.pbtxt, self.pbtxt_message]), self.diff])
        for index, title in enumerate(("Form", "config.pbtxt", "Diff vs disk")):
            tabs.set_title(index, title)
        header = w.HTML(f"<b>config.pbtxt of '{html.escape(self.editor.name)}'</b>")
        buttons = w.HBox([self.apply_button, self.revert_button, self.history, self.restore_button])
        return w.VBox([header, self.messages, tabs, self.warnings, buttons, self.status])

    def _field_row(self, field: FormField) -> Any:
        w = self.w
        message = w.HTML()
        self.field_messages[field.path] = message
        if field.path == "instance_group":
            add = w.Button(description="add group", icon="plus")
            add.on_click(lambda _: self._add_group())
            return w.VBox([w.HTML("<b>instance_group</b>"), self.rows_box, add, message])
        control = self._control(field)
        self.controls[field.path] = control
        return w.VBox(
            [w.HBox([w.Label(field.label, layout=w.Layout(width="180px")), control]), message]
        )

    def _control(self, field: FormField) -> Any:
        w = self.w
        if field.kind == INT:
            return w.IntText()
        if field.kind == BOOL:
            return w.Checkbox(indent=False)
        if field.kind == CHOICE:
            return w.Dropdown(options=list(field.choices))
        return w.Text(placeholder="e.g. 4, 8", continuous_update=False)

    def _io_table(self) -> Any:
        rows = "".join(
            f"<tr><td>{t['io']}</td><td>{html.escape(t['name'])}</td><td>{t['datatype']}</td>"
            f"<td>{t['dims']}</td></tr>"
            for t in self.editor.inputs_outputs()
        )
        head = "<tr><th>io</th><th>name</th><th>datatype</th><th>dims</th></tr>"
        return self.w.HTML(f"<b>inputs / outputs</b> (read-only)<table>{head}{rows}</table>")

    def _group_row(self, index: int, row: dict[str, Any]) -> Any:
        w = self.w
        count = w.IntText(value=row["count"], description="count", layout=w.Layout(width="160px"))
        kind = w.Dropdown(options=list(INSTANCE_KINDS), value=row["kind"], description="kind")
        gpus = w.Text(value=_ints_text(row["gpus"]), description="gpus", continuous_update=False)
        remove = w.Button(description="remove", icon="trash")
        for control in (count, kind, gpus):
            control.observe(lambda _change: self._rows_changed(), names="value")
        remove.on_click(lambda _: self._remove_group(index))
        return w.HBox([count, kind, gpus, remove])

    # -- user -> controller ----------------------------------------------------------------------
    def _connect(self) -> None:
        for path, control in self.controls.items():
            control.observe(lambda change, path=path: self._control_changed(path, change), "value")
        self.pbtxt.observe(self._pbtxt_changed, names="value")
        self.apply_button.on_click(lambda _: self._run(self.editor.apply))
        self.revert_button.on_click(lambda _: self._run(self.editor.revert))
        self.restore_button.on_click(lambda _: self._restore())

    def _control_changed(self, path: str, change: dict[str, Any]) -> None:
        if not self._updating:
            self._run(lambda: self.editor.set(path, change["new"]))

    def _pbtxt_changed(self, change: dict[str, Any]) -> None:
        if self._updating:
            return
        try:
            self.editor.pbtxt = change["new"]
        except WorkbenchError as exc:
            self.pbtxt_message.value = _error_html([str(exc)])

    def _rows_changed(self) -> None:
        if self._updating:
            return
        rows = []
        for row in self.rows_box.children:
            count, kind, gpus, _remove = row.children
            rows.append({"count": count.value, "kind": kind.value, "gpus": gpus.value})
        self._run(lambda: self.editor.set("instance_group", rows))

    def _add_group(self) -> None:
        rows = self.editor.get("instance_group") + [{"count": 1, "kind": "KIND_CPU", "gpus": []}]
        self._run(lambda: self.editor.set("instance_group", rows))

    def _remove_group(self, index: int) -> None:
        rows = self.editor.get("instance_group")
        del rows[index]
        self._run(lambda: self.editor.set("instance_group", rows))

    def _restore(self) -> None:
        steps = self.history.value
        if steps:
            self._run(lambda: self.editor.revert(steps=steps))

    def _run(self, action: Any) -> None:
        """Errors become messages in the view (the controller records them), never tracebacks."""
        try:
            action()
        except WorkbenchError:
            self.refresh()

    # -- controller -> widgets ----------------------------------------------------------------
    def _on_editor_change(self, _editor: ConfigEditor) -> None:
        self.refresh()

    def refresh(self) -> None:
        """Show the controller's draft, messages, diff and status."""
        editor = self.editor
        form = editor.form
        messages = editor.messages()
        self._updating = True
        try:
            for path, control in self.controls.items():
                value = form[path]
                control.value = _ints_text(value) if isinstance(value, list) else value
                field = next(f for f in FIELDS if f.path == path)
                control.disabled = bool(field.enabled_by) and not form[field.enabled_by]
            self._refresh_rows(form["instance_group"])
            self.pbtxt.value = editor.pbtxt
        finally:
            self._updating = False
        for path, widget in self.field_messages.items():
            widget.value = _error_html(messages.get(path, []))
        self.messages.value = _error_html(messages.get("", []))
        self.pbtxt_message.value = ""
        diff = editor.diff()
        self.diff.value = f"<pre>{html.escape(diff or 'no changes')}</pre>"
        self.warnings.value = _error_html(editor.warnings(), _WARNING_STYLE)
        self.status.value = html.escape(editor.status)
        self._refresh_history()

    def _refresh_history(self) -> None:
        """One entry per earlier version, newest first; its value is ``revert``'s ``steps``."""
        options = [
            (f"{steps}: {backup.saved_at:%Y-%m-%d %H:%M:%S} UTC", steps)
            for steps, backup in enumerate(self.editor.history(), start=1)
        ]
        self.history.options = options
        self.restore_button.disabled = not options

    def _refresh_rows(self, rows: list[dict[str, Any]]) -> None:
        if len(rows) != len(self.rows_box.children):
            self.rows_box.children = [self._group_row(i, row) for i, row in enumerate(rows)]
            return
        for box, row in zip(self.rows_box.children, rows, strict=True):
            count, kind, gpus, _remove = box.children
            count.value, kind.value, gpus.value = row["count"], row["kind"], _ints_text(row["gpus"])


def _sync_after_each_cell(editor: ConfigEditor) -> None:
    """In IPython, pick up in-place edits of ``editor.config`` once the cell has run."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    ref = weakref.ref(editor)

    def after_cell(*_args: Any) -> None:
        target = ref()
        if target is None:
            shell.events.unregister("post_run_cell", after_cell)
        else:
            target.sync()

    shell.events.register("post_run_cell", after_cell)


__all__ = ["ConfigEditorView"]
