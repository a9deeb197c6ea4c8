"""Find a real ``tritonserver`` binary and lay out what it needs to run here.

Three kinds of installation are recognised, searched in this order (after an explicit path or
``$WORKBENCH_TRITONSERVER``): ``tritonserver`` on ``PATH``, the NGC container's
``/opt/tritonserver``, and the binary bundled in the ``nvidia-pytriton`` wheel. The pytriton
build needs some wiring, which ``find_tritonserver`` does in a private cache folder:

- its shared libraries live in ``nvidia_pytriton.libs/`` (on ``LD_LIBRARY_PATH``);
- the python backend wants ``libtriton_python.so``, ``triton_python_backend_utils.py`` and the
  stub of the running Python side by side in ``<backend-directory>/python/``;
- the stub embeds ``libpython3.X.so.1.0``: the running interpreter's shared libpython is linked
  into a private library folder when it has one;
- the stub imports numpy from the first ``python3`` on ``PATH`` and needs **numpy < 2** there
  (with numpy 2 it silently returns empty outputs): this interpreter's ``bin/`` goes first.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from workbench._types import StrPath
from workbench.errors import NotFoundError

BINARY_ENV = "WORKBENCH_TRITONSERVER"
CACHE_ENV = "WORKBENCH_CACHE_DIR"
NGC_ROOT = Path("/opt/tritonserver")
#: the Triton release whose schema (``model_config_pb2``) this library mirrors
TRITON_VERSION = "2.51.0"
#: the NGC container tag that ships ``TRITON_VERSION``
NGC_TAG = "24.10"

_PYTRITON_BINARY = Path("pytriton", "tritonserver", "bin", "tritonserver")
_PYTHON_BACKEND_FILES = ("libtriton_python.so", "triton_python_backend_utils.py")
_STUB = "triton_python_backend_stub"


@dataclass(frozen=True)
class TritonBinary:
    """A runnable tritonserver: the executable, its backend folder and the environment."""

    executable: Path
    backend_dir: Path | None
    source: str
    env: dict[str, str] = field(default_factory=dict)
    #: why some backends will not work here (e.g. numpy 2 for the python stub)
    problems: tuple[str, ...] = ()
    #: backends present but known not to work here (see ``problems``)
    broken: frozenset[str] = frozenset()

    @property
    def backends(self) -> frozenset[str]:
        """Backends that can run: those in the backend folder (less ``broken``), and
        ``ensemble``, which is built into Triton's core."""
        found = {"ensemble"}
        if self.backend_dir is not None and self.backend_dir.is_dir():
            found |= {entry.name for entry in self.backend_dir.iterdir() if entry.is_dir()}
        return frozenset(found - self.broken)

    def child_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default ``os.environ``) with ``env`` prepended to the same variables."""
        return prepend_env(self.env, base)


def prepend_env(env: dict[str, str], base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) with each of ``env``'s paths put first in its variable."""
    merged = dict(os.environ if base is None else base)
    for name, value in env.items():
        previous = merged.get(name)
        merged[name] = f"{value}{os.pathsep}{previous}" if previous else value
    return merged


def find_tritonserver(path: StrPath | None = None) -> TritonBinary:
    """The tritonserver to use: ``path``, ``$WORKBENCH_TRITONSERVER``, ``PATH``, the NGC
    container, or the ``nvidia-pytriton`` wheel; ``NotFoundError`` naming where it looked."""
    candidates = _candidates(path)
    for source, executable in candidates:
        if executable.is_file() and os.access(executable, os.X_OK):
            return _describe(executable.resolve(), source)
    if path is not None:
        raise NotFoundError(f"tritonserver '{path}' does not exist or is not executable")
    looked = ", ".join(f"{source} ({exe})" for source, exe in candidates) or "nowhere"
    raise NotFoundError(
        "no tritonserver binary found; looked at: "
        f"{looked}. Set ${BINARY_ENV}, run inside nvcr.io/nvidia/tritonserver:{NGC_TAG}-py3, "
        "or pip install nvidia-pytriton (it bundles tritonserver with the python backend)"
    )


def tritonserver_available(path: StrPath | None = None) -> bool:
    """Whether ``find_tritonserver`` would succeed."""
    try:
        find_tritonserver(path)
    except NotFoundError:
        return False
    return True


def _candidates(path: StrPath | None) -> list[tuple[str, Path]]:
    if path is not None:
        return [("given", Path(path).expanduser())]
    found: list[tuple[str, Path]] = []
    if os.environ.get(BINARY_ENV):
        found.append((BINARY_ENV, Path(os.environ[BINARY_ENV]).expanduser()))
    on_path = shutil.which("tritonserver")
    if on_path:
        found.append(("PATH", Path(on_path)))
    found.append(("NGC container", NGC_ROOT / "bin" / "tritonserver"))
    spec = importlib.util.find_spec("pytriton")
    if spec is not None and spec.submodule_search_locations:
        package = Path(next(iter(spec.submodule_search_locations)))
        found.append(("nvidia-pytriton", package.parent / _PYTRITON_BINARY))
    return found


def _describe(executable: Path, source: str) -> TritonBinary:
    tritonserver_dir = executable.parent.parent
    if (tritonserver_dir / "python_backend_stubs").is_dir():
        return _pytriton_binary(executable, tritonserver_dir, source)
    backend_dir = tritonserver_dir / "backends"
    return TritonBinary(executable, backend_dir if backend_dir.is_dir() else None, source)


def _pytriton_binary(executable: Path, tritonserver_dir: Path, source: str) -> TritonBinary:
    """The pytriton wheel's layout: private backend and library folders, numpy check."""
    cache = _cache_dir() / hashlib.sha256(str(executable).encode()).hexdigest()[:12]
    libs = [str(tritonserver_dir.parent.parent / "nvidia_pytriton.libs")]
    private_lib = _private_lib_dir(cache)
    if private_lib is not None:
        libs.insert(0, str(private_lib))
    backend_dir, problems = _python_backend_dir(tritonserver_dir, cache)
    numpy_problem = _numpy_problem()
    if numpy_problem:
        problems.append(numpy_problem)
    env = {"LD_LIBRARY_PATH": os.pathsep.join(libs), "PATH": str(Path(sys.executable).parent)}
    broken = frozenset({"python"}) if problems else frozenset()
    return TritonBinary(executable, backend_dir, source, env, tuple(problems), broken)


def _cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV) or os.environ.get("XDG_CACHE_HOME")
    base = Path(configured) if configured else Path.home() / ".cache"
    return (base if os.environ.get(CACHE_ENV) else base / "triton-workbench") / "tritonserver"


def _python_backend_dir(tritonserver_dir: Path, cache: Path) -> tuple[Path, list[str]]:
    """``<cache>/backends/python/`` with the backend library, utils and this Python's stub."""
    x_y = f"{sys.version_info.major}.{sys.version_info.minor}"
    backend_dir = cache / f"backends-py{x_y}"
    stub = tritonserver_dir / "python_backend_stubs" / x_y / _STUB
    if not stub.is_file():
        # Without a stub for this Python the python backend cannot run: report no backends.
        return backend_dir, [f"the pytriton build has no python backend stub for Python {x_y}"]
    python_dir = backend_dir / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    sources = [tritonserver_dir / "backends" / "python" / name for name in _PYTHON_BACKEND_FILES]
    for source in [*sources, stub]:
        target = python_dir / source.name
        if not target.exists() or target.stat().st_size != source.stat().st_size:
            shutil.copy2(source, target)
    return backend_dir, []


def _private_lib_dir(cache: Path) -> Path | None:
    """A folder holding a link to this interpreter's shared libpython, for the stub."""
    soname = sysconfig.get_config_var("INSTSONAME")
    libdir = sysconfig.get_config_var("LIBDIR")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not soname or not libdir:
        return None
    libpython = Path(libdir) / soname
    if not libpython.exists():
        return None
    lib_dir = cache / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    link = lib_dir / libpython.name
    if not (link.is_symlink() and link.resolve() == libpython.resolve()):
        link.unlink(missing_ok=True)
        link.symlink_to(libpython)
    return lib_dir


def _numpy_problem() -> str:
    import numpy

    if int(numpy.__version__.split(".")[0]) >= 2:
        return (
            f"the python backend stub imports numpy from {sys.executable}, which has numpy "
            f"{numpy.__version__}; Triton's stub needs numpy<2 (pip install 'numpy<2')"
        )
    return ""


__all__ = [
    "BINARY_ENV",
    "NGC_TAG",
    "TRITON_VERSION",
    "TritonBinary",
    "find_tritonserver",
    "tritonserver_available",
]
