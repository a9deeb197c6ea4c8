"""IPython magics: ``%load_ext workbench``, then ``%workbench`` and ``%%pbtxt``.

``%workbench serve [REPOSITORY] [key=value ...]`` starts a ``Workbench`` (keys are its keyword
arguments, e.g. ``http_port=8000``), ``%workbench attach`` uses the Jupyter server extension's
server instead (``Workbench.attach()``), ``%workbench status`` shows it, ``%workbench stop``
stops it (an attached one is only detached: it keeps serving the other notebooks),
``%workbench sweep MODEL key=v1,v2 ...`` runs ``bench.sweep`` with those settings.
``%%pbtxt MODEL`` takes the cell as that model's ``config.pbtxt``: it is parsed and validated
as ``ConfigEditor.validate()`` does (errors name their line in the cell), the diff against the
file is shown, and the text is written atomically and the model reloaded (``--dry-run``: only
check and diff).

``MagicSession`` holds the logic and knows nothing of IPython, so it is tested without a
kernel; ``WorkbenchMagics`` is the thin IPython binding. A failure raises IPython's
``UsageError``: the cell shows one short message (no traceback) and "Run All" stops there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.config.pbtxt_patch import field_line
from workbench.errors import WorkbenchError
from workbench.notebook.workbench import Workbench

#: sweep keys that take a list of values (``key=1,4,8``)
_SWEEP_LISTS = frozenset(
    {"max_batch_size", "max_queue_delay_microseconds", "instance_count", "concurrency"}
)
USAGE = """\
%workbench serve [REPOSITORY] [key=value ...]   start a server (default: ./model_repository)
%workbench attach                               use the Jupyter server extension's server
%workbench status                               endpoints and models
%workbench stop                                 stop the server started here (or detach)
%workbench sweep MODEL key=v1,v2 ...            e.g. max_batch_size=1,8 concurrency=1,8
%%pbtxt MODEL [--dry-run]                       validate, diff, write and reload the cell"""


class MagicError(Exception):
    """A magic could not do what it was asked; the message is all the user needs."""


@dataclass(repr=False)
class PbtxtOutcome:
    """What ``%%pbtxt`` did: the diff it showed and whether the file was written."""

    model: str
    diff: str
    applied: bool
    status: str = ""

    def __str__(self) -> str:
        head = self.status or ("no change" if not self.diff else "not written (--dry-run)")
        return f"{head}\n{self.diff}" if self.diff else head

    __repr__ = __str__  # what the cell shows


@dataclass
class MagicSession:
    """The state behind the magics: the ``Workbench`` they act on.

    ``namespace`` is the user's namespace: when no server was started by ``%workbench serve``,
    the magics use the one ``Workbench`` the user made there themselves.
    """

    namespace: Mapping[str, Any] = field(default_factory=dict)
    factory: Callable[..., Workbench] = Workbench
    attacher: Callable[[], Workbench] = Workbench.attach
    bench: Workbench | None = None
    #: whether ``bench`` is the extension's server (``stop`` detaches) or one started here
    attached: bool = False

    # -- %workbench ----------------------------------------------------------------------------
    def run_line(self, line: str) -> Any:
        words = line.split()
        if not words or words[0] in ("help", "-h", "--help"):
            return USAGE
        command, args = words[0], words[1:]
        handlers: dict[str, Callable[[list[str]], Any]] = {
            "serve": self.serve,
            "attach": lambda _args: self.attach(),
            "status": lambda _args: self.current(),
            "stop": lambda _args: self.stop(),
            "sweep": self.sweep,
        }
        if command not in handlers:
            raise MagicError(f"unknown %workbench command '{command}'\n{USAGE}")
        return handlers[command](args)

    def serve(self, args: list[str]) -> Workbench:
        positional = [a for a in args if "=" not in a]
        options = _options(a for a in args if "=" in a)
        if len(positional) > 1:
            raise MagicError(f"serve takes one repository, got {' '.join(positional)}")
        repository = Path(positional[0] if positional else "model_repository")
        if not repository.is_dir():
            raise MagicError(f"no model repository at '{repository}' (a folder of models)")
        self._check_free()
        try:
            self.bench = self.factory(repository, **options)
        except TypeError as exc:
            raise MagicError(f"serve: {exc}") from None
        self.attached = False
        return self.bench

    def attach(self) -> Workbench:
        """The Jupyter server extension's server, shared by every notebook."""
        self._check_free()
        try:
            self.bench = self.attacher()
        except WorkbenchError as exc:
            raise MagicError(f"attach: {exc}") from None
        self.attached = True
        return self.bench

    def _check_free(self) -> None:
        if self.bench is not None and self.bench.running:
            what = "attached to" if self.attached else "started here is already running at"
            raise MagicError(f"a server {what} {self.bench.url}; %workbench stop first")

    def stop(self) -> str:
        if self.bench is None or not self.bench.running:
            return "no server started by %workbench serve or attached is running"
        url = self.bench.url
        self.bench.stop()
        if self.attached:
            return f"detached from the Jupyter server's server at {url} (it keeps serving)"
        return f"stopped the server at {url}"

    def sweep(self, args: list[str]) -> Any:
        if not args or "=" in args[0]:
            raise MagicError("usage: %workbench sweep MODEL key=v1,v2 ...")
        settings = _options(args[1:], lists=_SWEEP_LISTS)
        try:
            return self.current().sweep(args[0], **settings)
        except TypeError as exc:
            raise MagicError(f"sweep: {exc}") from None

    def current(self) -> Workbench:
        """The server the magics act on (started here, or the user's one ``Workbench``)."""
        if self.bench is not None and self.bench.running:
            return self.bench
        found = [v for v in self.namespace.values() if isinstance(v, Workbench) and v.running]
        unique = list({id(bench): bench for bench in found}.values())
        if len(unique) == 1:
            return unique[0]
        if not unique:
            raise MagicError("no running Workbench: %workbench serve [REPOSITORY] starts one")
        raise MagicError(
            "several running Workbench objects in this notebook; %workbench serve one here"
        )

    # -- %%pbtxt -------------------------------------------------------------------------------
    def pbtxt(self, line: str, cell: str) -> PbtxtOutcome:
        words = line.split()
        dry_run = "--dry-run" in words
        names = [w for w in words if w != "--dry-run"]
        if len(names) != 1:
            raise MagicError("usage: %%pbtxt MODEL [--dry-run], the cell being its config.pbtxt")
        model = names[0]
        editor = self.current().edit(model)
        try:
            editor.pbtxt = cell
        except WorkbenchError as exc:
            raise MagicError(f"{model}: the cell does not parse as config.pbtxt: {exc}") from None
        problems = editor.validate()
        if problems:
            listed = "\n".join(_located(cell, p.field, p.message) for p in problems)
            raise MagicError(f"{model}: not written, the config is invalid:\n{listed}")
        diff = editor.diff()
        if dry_run or not diff:
            return PbtxtOutcome(model, diff, applied=False)
        try:
            editor.apply()
        except WorkbenchError as exc:
            raise MagicError(str(exc)) from None
        return PbtxtOutcome(model, diff, applied=True, status=editor.status)


def _located(cell: str, path: str, message: str) -> str:
    line = field_line(cell, path)
    return f"  line {line}: {path}: {message}" if line else f"  {path}: {message}"


def _options(pairs: Any, *, lists: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``key=value`` words as keyword arguments: numbers as numbers, ``a,b`` as a list."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, _, text = pair.partition("=")
        values = [_value(v) for v in text.split(",")] if text else []
        if not key or not values:
            raise MagicError(f"expected key=value, got '{pair}'")
        options[key] = values if key in lists or len(values) > 1 else values[0]
    return options


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext workbench``: register ``%workbench`` and ``%%pbtxt``."""
    from IPython.core.error import UsageError
    from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

    session = MagicSession(namespace=ipython.user_ns)

    @magics_class
    class WorkbenchMagics(Magics):
        @line_magic
        def workbench(self, line: str) -> Any:
            try:
                result = session.run_line(line)
            except MagicError as exc:
                raise UsageError(str(exc)) from None
            if isinstance(result, str):
                print(result)  # a message, not a value to display with quotes
                return None
            return result

        @cell_magic
        def pbtxt(self, line: str, cell: str) -> PbtxtOutcome:
            try:
                return session.pbtxt(line, cell)
            except MagicError as exc:
                raise UsageError(str(exc)) from None

    ipython.register_magics(WorkbenchMagics)


__all__ = ["MagicError", "MagicSession", "PbtxtOutcome", "load_ipython_extension"]
