"""Import a ``model.py`` the way Triton's stub does, once per model instance.

Triton runs each instance in its own stub process, puts the version folder and the model
folder on ``sys.path`` and imports ``<version>.model``. Our stubs do the same through this
loader; for in-process instances (``WORKBENCH_IN_PROCESS``) and auto-complete, which share the
server's process, every import gets a private package (named after the model, bound to its
version folder) so that two models called ``model.py`` never share a module and relative
imports still work. Helper modules imported by plain name through ``sys.path`` are shared by
the process (a known limit of in-process execution, which stubs do not have).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
import traceback
import types
from pathlib import Path

from workbench.backends.python import pb_utils
from workbench.errors import InternalError, NotFoundError

#: this package's folder: its frames are left out of a model's traceback
_PACKAGE = str(Path(__file__).resolve().parents[2]) + "/"

_counter = itertools.count()
#: the model folders this process put on ``sys.path`` (a stub must not inherit other models')
ADDED_PATHS: set[str] = set()


def install_shim() -> None:
    """Make ``import triton_python_backend_utils`` resolve to ``pb_utils``."""
    sys.modules.setdefault("triton_python_backend_utils", pb_utils)


def load_module(model_name: str, model_file: Path) -> types.ModuleType:
    """Execute ``model_file`` as a fresh module; raise ``InternalError`` if it fails."""
    if not model_file.is_file():
        raise NotFoundError(f"Python model file not found in '{model_file}'")
    install_shim()
    version_dir = model_file.parent
    for folder in (str(version_dir), str(version_dir.parent)):
        if folder not in sys.path:
            sys.path.append(folder)
            ADDED_PATHS.add(folder)
    safe_name = re.sub(r"\W", "_", model_name)
    package = f"_triton_model_{safe_name}_{next(_counter)}"
    package_module = types.ModuleType(package)
    package_module.__path__ = [str(version_dir)]
    sys.modules[package] = package_module
    name = f"{package}.{model_file.stem}"
    try:
        # imported by name, as Triton's stub does: a failure shows the same importlib frames
        module = importlib.import_module(name)
    except Exception as exc:
        _forget(package)
        # skipped after this function: importlib.import_module and _gcd_import
        raise InternalError(python_error_text(exc, skip=2)) from exc
    if not isinstance(getattr(module, "TritonPythonModel", None), type):
        unload_module(module)
        raise InternalError(f"python model '{model_name}' does not define class TritonPythonModel")
    return module


def python_error_text(exc: BaseException, skip: int = 0) -> str:
    """An exception as Triton's python backend words it (pybind11's): ``Type: message``, a
    blank line, ``At:`` and the frames innermost first as ``  file(line): function``.

    The outermost frames that are this package's are left out (Triton's C++ calls the model
    directly), then ``skip`` more.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    while frames and frames[0].filename.startswith(_PACKAGE):
        frames.pop(0)
    del frames[:skip]
    lines = "".join(f"  {f.filename}({f.lineno}): {f.name}\n" for f in reversed(frames))
    return f"{type(exc).__name__}: {exc}\n\nAt:\n{lines}"


def unload_module(module: types.ModuleType) -> None:
    """Forget a module imported by ``load_module`` (and its private package)."""
    _forget(module.__name__.rpartition(".")[0])


def _forget(package: str) -> None:
    # ``list(sys.modules)`` copies the keys in one step: iterating the dict itself raises
    # "dictionary changed size during iteration" when another thread imports meanwhile (a
    # load's auto-complete runs here on a pool thread while other threads import lazily).
    for name in [n for n in list(sys.modules) if n == package or n.startswith(package + ".")]:
        sys.modules.pop(name, None)
