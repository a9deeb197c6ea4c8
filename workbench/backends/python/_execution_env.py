"""``EXECUTION_ENV_PATH``: the Python environment a model's stubs run in, as in Triton.

Triton's python_backend (``stub_launcher.cc``, ``pb_env.cc``) reads the model parameter
``EXECUTION_ENV_PATH``, replaces ``$$TRITON_MODEL_DIRECTORY`` with the model's folder, takes
the canonical path, extracts a ``.tar.gz`` (a conda-pack archive) once into a temporary folder
(again when the archive's modification time changes; a folder is used as it is), requires
``<env>/bin/activate`` and starts the stub with ``source <env>/bin/activate && exec env
LD_LIBRARY_PATH=<env>/lib:$LD_LIBRARY_PATH <stub>``. The errors below are tritonserver 2.51's
words for a path that does not exist and an environment without ``activate``; what was observed
is in ``docs/python-execution-env-facts.md``.

Our stub is Python rather than a binary that embeds ``libpython``, so it runs on the
environment's own ``bin/python3``: the model's code runs on that interpreter and imports the
environment's packages first. The stub itself needs ``workbench`` and its dependencies (numpy,
protobuf, tritonclient): ``workbench`` is always the server's own package; when the
environment's Python has the server's major.minor version, the server's import paths follow
the environment's, so whatever the environment lacks comes from the server's environment
(Triton would fail such an import). An environment on another Python version must provide
them itself (``pip install triton-workbench`` there); the server's ``PYTHONPATH``, if set,
is passed on unchanged, as Triton passes its environment.

Why it matters beyond compatibility: a CPU-bound Python model runs at the speed of the
interpreter that runs it, and the sweeps here predict a Triton whose stub embeds another
build of Python only when the model runs on a build like it (``benchmarks/README.md``,
transfer).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from workbench.config.platforms import execution_env_path
from workbench.errors import InternalError

_log = logging.getLogger("workbench.backends.python")
_VERSION_PROBE = "import sys; print('%d.%d' % sys.version_info[:2])"


@dataclass(frozen=True)
class ExecutionEnv:
    """A model's Python environment, ready to start stubs in."""

    #: the environment's folder (where an archive was extracted)
    root: Path
    #: its interpreter, the stub's
    python: Path
    #: that interpreter's (major, minor)
    version: tuple[int, int]

    @property
    def activate(self) -> Path:
        return self.root / "bin" / "activate"

    @property
    def shares_server_packages(self) -> bool:
        """Whether the server's packages may fill in what the environment lacks (compiled
        modules load only into the Python version they were built for)."""
        return self.version == sys.version_info[:2]

    def command(self, arguments: list[str]) -> list[str]:
        """The stub's command line: the interpreter with ``arguments``, the environment
        activated first, as Triton starts its stub."""
        # ``source`` without arguments of its own would hand the script ours (a conda
        # ``activate`` passes them on to ``conda activate``): Triton's has none.
        script = (
            'activate=$1; shift; command=("$@"); set --; source "$activate" && exec "${command[@]}"'
        )
        return ["bash", "-c", script, "bash", str(self.activate), str(self.python), *arguments]

    def environ(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with the environment's ``lib`` first on ``LD_LIBRARY_PATH``."""
        env = dict(base)
        libraries = [str(self.root / "lib"), env.get("LD_LIBRARY_PATH", "")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in libraries if p)
        return env


def resolve(config: model_config_pb2.ModelConfig, model_path: Path) -> ExecutionEnv | None:
    """The environment the model's stubs run in (None: the server's own interpreter).

    Raises ``InternalError`` with Triton's message when the path does not exist or the
    environment has no ``activate`` script.
    """
    path = execution_env_path(config, model_path)
    if path is None:
        return None
    return _ENVIRONMENTS.get(path)


class _Environments:
    """Environments by canonical path, archives extracted once per server process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._base: Path | None = None
        self._folders = itertools.count()
        #: canonical path -> (environment, modification time of the path when read)
        self._known: dict[str, tuple[ExecutionEnv, float]] = {}

    def remove_extracted(self) -> None:
        """Delete the extracted archives (at exit: this module is imported with the server,
        before any server registers its own stop, so this runs after those)."""
        if self._base is not None:
            shutil.rmtree(self._base, ignore_errors=True)

    def get(self, path: str) -> ExecutionEnv:
        canonical = os.path.realpath(path)
        with self._lock:  # instances of one model start on several threads
            try:  # read under the lock: one extraction each
                modified = os.stat(canonical).st_mtime
            except OSError:
                raise InternalError(f"Failed to get the canonical path for {path}.") from None
            known = self._known.get(canonical)
            if known is not None and known[1] == modified:
                return known[0]
            root = Path(canonical)
            if root.is_file():
                root = self._extract(root, known[0].root if known is not None else None)
            env = _inspect(root)
            self._known[canonical] = (env, modified)
            _log.info("Using Python execution env %s (%s)", path, env.python)  # Triton's words
            return env

    def _extract(self, archive: Path, previous: Path | None) -> Path:
        if previous is not None:  # the archive changed: extract it again in the same place
            shutil.rmtree(previous, ignore_errors=True)
        if self._base is None:
            self._base = Path(tempfile.mkdtemp(prefix="python_env_"))
        target = previous or self._base / str(next(self._folders))
        target.mkdir(parents=True, exist_ok=True)
        try:
            with tarfile.open(archive) as bundle:
                _extract_all(bundle, target)
        except (OSError, tarfile.TarError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise InternalError(
                f"Failed to extract the Python execution environment {archive}: {exc}"
            ) from exc
        return target


def _extract_all(bundle: tarfile.TarFile, target: Path) -> None:
    """Extract refusing absolute or escaping member names (a conda-pack archive has none),
    where this Python's tarfile can (3.10.12, 3.11.4 and later)."""
    if hasattr(tarfile, "tar_filter"):
        bundle.extractall(target, filter="tar")
    else:  # pragma: no cover - older patch releases
        bundle.extractall(target)  # noqa: S202


def _inspect(root: Path) -> ExecutionEnv:
    activate = root / "bin" / "activate"
    if not activate.exists():
        raise InternalError(
            f"Path {activate} does not exist. The Python environment should contain an "
            "'activate' script."
        )
    candidates = (root / "bin" / name for name in ("python3", "python"))
    python = next((path for path in candidates if path.exists()), None)
    if python is None:
        raise InternalError(f"The Python environment {root} has no bin/python3 to run the model.")
    try:
        probe = subprocess.run(
            [str(python), "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=60
        )
        major, minor = (int(part) for part in probe.stdout.split("."))
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        raise InternalError(
            f"The Python of the execution environment {root} did not run: {exc}"
        ) from exc
    return ExecutionEnv(root, python, (major, minor))


_ENVIRONMENTS = _Environments()
atexit.register(_ENVIRONMENTS.remove_extracted)
