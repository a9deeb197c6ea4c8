"""Read, validate, diff and write a model's ``config.pbtxt`` for the REST routes.

Every check and write goes through ``workbench.notebook.ConfigEditor``, the notebook editor's
own path: the server's validator, the model-file and ensemble checks, the atomic write with
history, the reload, and the rollback when the reload fails. So a config the panel saves is
held to exactly what ``bench.edit(...).apply()`` and ``%%pbtxt`` hold it to. Each problem is
returned with the line of the text it is about (``field_line``), a parse error with its own.

The editor's checks read files and may run a python model's ``auto_complete_config``, so they
run in a worker thread; the reload they ask for goes back to the Jupyter loop's client (for a
remote engine, with the written config as the load's override). Writes are one at a time.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench import threads
from workbench.config import parse_pbtxt, read_config, to_json_dict
from workbench.config.pbtxt_patch import field_line
from workbench.errors import ConfigError, InvalidArgumentError, NotFoundError
from workbench.jupyter.host import ServerHost
from workbench.notebook.config_editor import ConfigEditor
from workbench.threads import Work

#: ``source:line:column:`` in a parse error
_PARSE_LOCATION = re.compile(r":(\d+):(\d+): ")


class InvalidConfigError(InvalidArgumentError):
    """A config refused before anything was written; ``problems`` as the routes return them."""

    def __init__(self, message: str, problems: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.problems = problems


class ModelConfigs:
    """The config routes' work, on the repository the host serves."""

    def __init__(self, host: ServerHost) -> None:
        self.host = host
        self._write_lock = asyncio.Lock()

    def model_dir(self, name: str) -> Path:
        if not name or name.startswith(".") or "/" in name or "\\" in name:
            raise InvalidArgumentError(f"'{name}' is not a model name")
        if self.host.repository is None:
            raise NotFoundError("no model repository is being served")
        folder = self.host.repository / name
        if not (folder / "config.pbtxt").is_file():
            raise NotFoundError(f"model '{name}' has no config.pbtxt in {self.host.repository}")
        return folder

    async def read(self, name: str) -> dict[str, Any]:
        """The file's text, its JSON form (Triton's ``/config`` layout; None when it does not
        parse, with the problem) and the earlier versions kept by earlier writes."""
        folder = self.model_dir(name)
        return await threads.run(Work.FILES, _read, name, folder)

    async def validate(self, name: str, text: str) -> dict[str, Any]:
        problems = await threads.run(Work.FILES, self._check, name, text)
        return {"valid": not problems, "problems": problems}

    async def diff(self, name: str, text: str) -> dict[str, Any]:
        """The diff from the file to ``text``, and what a write would refuse or lose."""
        return await threads.run(Work.FILES, self._diff, name, text)

    async def write(self, name: str, text: str) -> dict[str, Any]:
        """Validate, write atomically, reload; refused (``InvalidConfigError``, nothing
        written) when invalid; restored when the reload fails (``UnavailableError``)."""
        async with self._write_lock:
            return await threads.run(Work.FILES, self._write, name, text, self._reloader())

    # -- in the worker thread ------------------------------------------------------------------
    def _editor(self, name: str, reload: Callable[[str], None] | None) -> ConfigEditor:
        return ConfigEditor(name, self.model_dir(name), reload=reload or _no_reload)

    def _check(self, name: str, text: str) -> list[dict[str, Any]]:
        return _problems(self._editor(name, None), text)

    def _diff(self, name: str, text: str) -> dict[str, Any]:
        editor = self._editor(name, None)
        problems = _problems(editor, text)
        if problems and problems[0]["field"] == "":  # does not parse: nothing to compare
            return {"diff": "", "problems": problems, "warnings": []}
        return {"diff": editor.diff(), "problems": problems, "warnings": editor.warnings()}

    def _write(self, name: str, text: str, reload: Callable[[str], None]) -> dict[str, Any]:
        editor = self._editor(name, reload)
        problems = _problems(editor, text)
        if problems:
            listed = "; ".join(_located(p) for p in problems)
            raise InvalidConfigError(
                f"model '{name}': not written, the config is invalid: {listed}", problems
            )
        diff, warnings = editor.diff(), editor.warnings()
        if not diff:
            return {"applied": False, "status": "no change", "diff": "", "warnings": []}
        editor.apply()
        return {"applied": True, "status": editor.status, "diff": diff, "warnings": warnings}

    def _reloader(self) -> Callable[[str], None]:
        """A reload the worker thread can call: the load runs on the Jupyter loop. When no
        server runs, the file is only written (the next start loads it). A remote server
        cannot read the file just written: it gets the file's config as the load's override."""
        client = self.host.client
        if client is None:
            return _no_reload
        loop, remote = asyncio.get_running_loop(), self.host.remote

        def reload(name: str) -> None:
            path = self.model_dir(name) / "config.pbtxt"
            config = to_json_dict(read_config(path)) if remote else None
            asyncio.run_coroutine_threadsafe(client.load(name, config), loop).result()

        return reload


def _read(name: str, folder: Path) -> dict[str, Any]:
    path = folder / "config.pbtxt"
    text = path.read_text(encoding="utf-8")
    try:
        config: dict[str, Any] | None = to_json_dict(parse_pbtxt(text, source="config.pbtxt"))
        problems = []
    except ConfigError as exc:
        config, problems = None, [_parse_problem(exc)]
    editor = ConfigEditor(name, folder, reload=_no_reload) if config is not None else None
    history = editor.history() if editor is not None else []
    return {
        "name": name,
        "path": str(path),
        "pbtxt": text,
        "config": config,
        "problems": problems,
        "history": [{"file": b.path.name, "saved_at": b.saved_at.isoformat()} for b in history],
    }


def _problems(editor: ConfigEditor, text: str) -> list[dict[str, Any]]:
    try:
        editor.pbtxt = text
    except ConfigError as exc:
        return [_parse_problem(exc)]
    return [
        {"field": p.field, "message": p.message, "line": field_line(text, p.field)}
        for p in editor.validate()
    ]


def _parse_problem(exc: ConfigError) -> dict[str, Any]:
    match = _PARSE_LOCATION.search(str(exc))
    return {"field": "", "message": str(exc), "line": int(match.group(1)) if match else None}


def _located(problem: dict[str, Any]) -> str:
    where = f"line {problem['line']}: " if problem["line"] else ""
    field = f"{problem['field']}: " if problem["field"] else ""
    return f"{where}{field}{problem['message']}"


def _no_reload(_name: str) -> None:
    """No server runs: the file is written and loads at the next start."""


__all__ = ["InvalidConfigError", "ModelConfigs"]
