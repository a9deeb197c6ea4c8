"""Real Triton Inference Server 2.51 and perf_analyzer, prepared from the package registry.

The conformance tests compare the workbench against the real thing. Neither needs Docker nor a
GPU: both binaries ship inside ordinary wheels on PyPI.

- ``nvidia-pytriton==0.7.0`` carries ``pytriton/tritonserver/bin/tritonserver`` (Triton 2.51,
  Python backend only), the backend, one ``triton_python_backend_stub`` per Python version, and
  its shared libraries (``nvidia_pytriton.libs/``, auditwheel-style hashed names).
- ``tritonclient==2.41.0`` (the ``manylinux1_x86_64`` wheel, not the pure-Python one) carries
  ``tritonclient-2.41.0.data/data/bin/perf_analyzer``.

``prepare()`` downloads both wheels with ``pip download --no-deps`` into a cache folder
(``<repo>/.peers/``, gitignored; ``WORKBENCH_PEERS_DIR`` overrides), unzips only what it needs,
and returns a :class:`Peers`. ``TritonServerProcess`` runs tritonserver on loopback ports;
``run_perf_analyzer()`` runs perf_analyzer. The module needs only the standard library, so CI can
run ``python tests/integration/peers.py prepare`` (or ``python -m tests.integration.peers
prepare``) before pytest; it exits non-zero with a message when the peers cannot be prepared.

Gotchas, each learnt the hard way:

- The stub embeds ``libpython3.X.so.1.0`` (not bundled for 3.8-3.12). ``prepare()`` links the
  running interpreter's own shared libpython into the private lib folder when it has one;
  otherwise the system one (``apt-get install libpython3.X``) must exist.
- The stub is an embedded interpreter whose ``sys.prefix`` comes from the first ``python3`` on
  ``PATH``; it imports ``numpy`` (and whatever ``model.py`` imports) from there. That interpreter
  must have **numpy < 2**: with numpy 2 the stub silently returns empty outputs. ``prepare()``
  uses the running interpreter's ``bin/`` when its numpy is 1.x, and otherwise builds
  ``<peers>/stub-venv-py3.X`` with ``numpy<2``; the child environment puts that ``bin/`` first on
  ``PATH``. A symlink to a venv's python would not do: the embedded interpreter finds
  ``pyvenv.cfg`` only next to the unresolved path.
- The stub writes ``__pycache__/`` next to each ``model.py`` and ignores
  ``PYTHONDONTWRITEBYTECODE``; serve a copy of a version-controlled repository
  (``copy_repository()``; the fixtures do).
- The stub must match the running Python's major.minor (``python_backend_stubs/3.X/``), and must
  sit in ``<backend-directory>/python/`` next to ``libtriton_python.so``.
- The stub's RPATH points four levels up to ``nvidia_pytriton.libs``; once copied into the
  backend folder it finds its libraries only through ``LD_LIBRARY_PATH``.
- perf_analyzer is linked against ``libb64.so.0d`` and ``libcudart.so.12``; the pytriton wheel has
  both under hashed names, so a private folder holds symlinks with the expected names. It runs
  fine without a GPU.
- perf_analyzer needs ``GET /v2/models/{m}/config``, and prints its ``Server:`` section only when
  the server metadata lists the ``statistics`` extension.
- ``--model-control-mode explicit`` plus ``--load-model *`` loads everything at start and still
  allows the repository load/unload API (``none`` refuses it; ``poll`` races with tests).
- Triton waits up to ``--exit-timeout-secs`` (default 30) for in-flight work on SIGTERM; it is set
  low here. Triton is started in its own session so that stub processes left behind by a SIGKILL
  can be killed by that process group, and nothing else.
- Ports are picked by binding port 0 and releasing it, which can race; a start that fails with
  "address already in use" is retried with fresh ports.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import platform
import shutil
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workbench.export.triton_process import TritonProcess, wait_http
from workbench.export.tritonserver import TritonBinary, prepend_env

PYTRITON_VERSION = "0.7.0"
TRITONCLIENT_VERSION = "2.41.0"
TRITON_VERSION = "2.51.0"

REPO_ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR_ENV = "WORKBENCH_PEERS_DIR"

_PYTRITON_PLATFORM = "manylinux_2_35_x86_64"
_TRITONCLIENT_PLATFORM = "manylinux1_x86_64"
_PERF_ANALYZER_MEMBER = f"tritonclient-{TRITONCLIENT_VERSION}.data/data/bin/perf_analyzer"
_SERVER_PREFIX = "pytriton/tritonserver/"
_LIBS_PREFIX = "nvidia_pytriton.libs/"
# Library names perf_analyzer asks for -> prefix of the hashed file in nvidia_pytriton.libs.
_LIB_ALIASES = {"libb64.so.0d": "libb64-", "libcudart.so.12": "libcudart-"}
_OFFLINE_MARKERS = (
    "NewConnectionError",
    "Failed to establish a new connection",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "ConnectTimeoutError",
    "ProxyError",
    "Max retries exceeded",
)


class PeersUnavailable(RuntimeError):
    """The peers could not be prepared; ``offline`` says whether the registry was unreachable."""

    def __init__(self, message: str, *, offline: bool = False) -> None:
        super().__init__(message)
        self.offline = offline


@dataclass(frozen=True)
class Peers:
    """Paths of the prepared peers and the environment their processes need."""

    root: Path
    tritonserver: Path
    backend_dir: Path
    lib_dir: Path
    perf_analyzer: Path | None
    stub_python_bin: Path
    env: dict[str, str] = field(default_factory=dict)

    def child_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """``base`` (default ``os.environ``) with ``env`` applied: PATH and LD_LIBRARY_PATH."""
        return prepend_env(self.env, base)

    def binary(self) -> TritonBinary:
        """The prepared tritonserver as ``workbench.export`` runs one."""
        return TritonBinary(self.tritonserver, self.backend_dir, "peers", dict(self.env))


def peers_dir() -> Path:
    """The cache folder: ``$WORKBENCH_PEERS_DIR`` or ``<repo>/.peers``."""
    return Path(os.environ.get(PEERS_DIR_ENV) or REPO_ROOT / ".peers").resolve()


def prepare(root: Path | None = None) -> Peers:
    """Download (once) and lay out tritonserver, its Python backend and perf_analyzer."""
    root = (root or peers_dir()).resolve()
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise PeersUnavailable(f"the peers are linux x86_64 binaries, not {sys.platform}")
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / ".lock"):
        server_root = _extract_pytriton(root)
        perf_analyzer = _extract_perf_analyzer(root)
        lib_dir = _build_lib_dir(root, server_root)
        backend_dir = _build_backend_dir(root, server_root)
        stub_python_bin = _stub_python_bin(root)
    lib_path = os.pathsep.join([str(lib_dir), str(server_root / "nvidia_pytriton.libs")])
    return Peers(
        root=root,
        tritonserver=server_root / _SERVER_PREFIX / "bin" / "tritonserver",
        backend_dir=backend_dir,
        lib_dir=lib_dir,
        perf_analyzer=perf_analyzer,
        stub_python_bin=stub_python_bin,
        env={"LD_LIBRARY_PATH": lib_path, "PATH": str(stub_python_bin)},
    )


def _numpy_major(python: Path) -> int | None:
    """numpy's major version as ``python`` imports it, or None when it cannot import it."""
    probe = [str(python), "-c", "import numpy; print(numpy.__version__)"]
    result = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        return None
    return int(result.stdout.strip().split(".")[0])


def _stub_python_bin(root: Path) -> Path:
    """A ``bin/`` whose ``python3`` has numpy<2: this interpreter's, or a private venv's."""
    own_bin = Path(sys.executable).parent
    if (own_bin / "python3").exists() and _numpy_major(own_bin / "python3") == 1:
        return own_bin
    venv = root / f"stub-venv-py{_python_x_y()}"
    python3 = venv / "bin" / "python3"
    if not python3.exists() or _numpy_major(python3) != 1:
        _run_setup([sys.executable, "-m", "venv", "--clear", str(venv)])
        _run_setup([str(python3), "-m", "pip", "install", "--quiet", "numpy<2"])
    return python3.parent


def _run_setup(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        raise PeersUnavailable(
            f"`{' '.join(command)}` failed (exit {result.returncode}):\n{output[-3000:]}",
            offline=any(marker in output for marker in _OFFLINE_MARKERS),
        )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    # Several pytest workers or CI steps may prepare the same cache at once.
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(root: Path, requirement: str, wheel_platform: str) -> Path:
    """``pip download`` one wheel into ``root/wheels`` unless it is already there."""
    wheels = root / "wheels"
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    found = sorted(path for path in wheels.glob(f"{stem}*.whl") if wheel_platform in path.name)
    if found:
        return found[0]
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--platform", wheel_platform, "--retries", "2", "--timeout", "60",
        "--dest", str(wheels), requirement,
    ]  # fmt: skip
    _run_setup(command)
    found = sorted(path for path in wheels.glob(f"{stem}*.whl") if wheel_platform in path.name)
    if not found:
        raise PeersUnavailable(f"`{' '.join(command)}` saved no {wheel_platform} wheel")
    return found[0]


def _extract(wheel: Path, members: Sequence[str], target: Path) -> None:
    """Unzip ``members`` of ``wheel`` into ``target`` atomically, keeping the exec bits."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in members:
                archive.extract(member, staging)
                mode = archive.getinfo(member).external_attr >> 16
                (staging / member).chmod((mode & 0o777) | stat.S_IRUSR | stat.S_IWUSR)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _python_x_y() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _wanted_server_member(name: str) -> bool:
    if name.endswith("/"):
        return False
    python_x_y = _python_x_y()
    if name.startswith(_LIBS_PREFIX):
        # The bundled libpython (30 MB) is only for the stub of that very Python version.
        return "libpython" not in name or f".{sys.version_info.minor}.so" in name
    return name in {
        f"{_SERVER_PREFIX}bin/tritonserver",
        f"{_SERVER_PREFIX}backends/python/libtriton_python.so",
        f"{_SERVER_PREFIX}backends/python/triton_python_backend_utils.py",
        f"{_SERVER_PREFIX}python_backend_stubs/{python_x_y}/triton_python_backend_stub",
    }


def _extract_pytriton(root: Path) -> Path:
    target = root / f"pytriton-{PYTRITON_VERSION}-py{_python_x_y()}"
    if not (target / _SERVER_PREFIX / "bin" / "tritonserver").exists():
        wheel = _download(root, f"nvidia-pytriton=={PYTRITON_VERSION}", _PYTRITON_PLATFORM)
        with zipfile.ZipFile(wheel) as archive:
            members = [name for name in archive.namelist() if _wanted_server_member(name)]
        if not any("python_backend_stubs" in name for name in members):
            raise PeersUnavailable(f"{wheel.name} has no Python backend stub for {sys.version}")
        _extract(wheel, members, target)
    return target


def _extract_perf_analyzer(root: Path) -> Path | None:
    target = root / f"tritonclient-{TRITONCLIENT_VERSION}"
    binary = target / _PERF_ANALYZER_MEMBER
    if not binary.exists():
        wheel = _download(root, f"tritonclient=={TRITONCLIENT_VERSION}", _TRITONCLIENT_PLATFORM)
        with zipfile.ZipFile(wheel) as archive:
            if _PERF_ANALYZER_MEMBER not in archive.namelist():
                return None
        _extract(wheel, [_PERF_ANALYZER_MEMBER], target)
    return binary


def _build_lib_dir(root: Path, server_root: Path) -> Path:
    """Symlinks under the names perf_analyzer and the stub ask for."""
    lib_dir = root / "lib"
    lib_dir.mkdir(exist_ok=True)
    bundled = server_root / "nvidia_pytriton.libs"
    for alias, prefix in _LIB_ALIASES.items():
        matches = sorted(bundled.glob(f"{prefix}*"))
        if not matches:
            raise PeersUnavailable(f"no {prefix}* in {bundled} to provide {alias}")
        _symlink(lib_dir / alias, matches[0])
    libpython = _shared_libpython()
    if libpython is not None:
        _symlink(lib_dir / libpython.name, libpython)
    return lib_dir


def _shared_libpython() -> Path | None:
    """The running interpreter's ``libpython3.X.so.1.0``, if it was built shared."""
    soname = sysconfig.get_config_var("INSTSONAME")
    libdir = sysconfig.get_config_var("LIBDIR")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not soname or not libdir:
        return None
    candidate = Path(libdir) / soname
    return candidate if candidate.exists() else None


def _symlink(link: Path, target: Path) -> None:
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def _build_backend_dir(root: Path, server_root: Path) -> Path:
    """``<backends>/python/`` with the backend library, its utils module and the stub."""
    python_x_y = _python_x_y()
    stubs = server_root / _SERVER_PREFIX / "python_backend_stubs"
    backend_dir = root / f"backends-py{python_x_y}"
    python_dir = backend_dir / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    sources = [
        server_root / _SERVER_PREFIX / "backends/python/libtriton_python.so",
        server_root / _SERVER_PREFIX / "backends/python/triton_python_backend_utils.py",
        stubs / python_x_y / "triton_python_backend_stub",
    ]
    for source in sources:
        destination = python_dir / source.name
        if not destination.exists():
            shutil.copy2(source, destination)
    return backend_dir


def copy_repository(source: Path, destination: Path) -> Path:
    """Copy a model repository, without bytecode, so that the stubs' ``__pycache__`` lands there."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(source, destination, ignore=ignore, dirs_exist_ok=True)
    return destination


def gather_models(models: dict[str, Path], destination: Path) -> Path:
    """A repository of the named models, each copied (without bytecode) from its repository."""
    for name, source in models.items():
        copy_repository(source / name, destination / name)
    return destination


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TritonServerProcess(TritonProcess):
    """Real tritonserver 2.51 from the prepared peers on loopback, as a context manager;
    stopped by pid on exit. Unlike promote's verification it is strict (a model that fails
    to load at start fails the start) and ``start`` waits until the server is ready.

    ``http_url``/``grpc_url`` are ``host:port`` strings as tritonclient and perf_analyzer want.
    """

    def __init__(
        self,
        peers: Peers,
        model_repository: Path,
        *,
        log_path: Path | None = None,
        model_control_mode: str = "explicit",
        load_models: Sequence[str] = ("*",),
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float = 15.0,
        extra_args: Sequence[str] = (),
    ) -> None:
        super().__init__(
            model_repository,
            binary=peers.binary(),
            log_path=log_path,
            load_models=load_models,
            model_control_mode=model_control_mode,
            tolerant=False,
            readiness="ready",
            startup_timeout_s=startup_timeout_s,
            stop_timeout_s=stop_timeout_s,
            extra_args=extra_args,
        )
        self.peers = peers
        self.startup_s = 0.0

    @property
    def model_repository(self) -> Path:
        return self.repository

    @property
    def http_url(self) -> str:
        return self.http_address

    @property
    def pid(self) -> int:
        assert self.process is not None, "tritonserver is not running"
        return self.process.pid

    def start(self, attempts: int = 3) -> TritonServerProcess:
        """Start tritonserver and wait for ``/v2/health/ready``; retry on a port clash."""
        started = time.monotonic()
        super().start(attempts)
        self.startup_s = time.monotonic() - started
        return self


def wait_ready(process: subprocess.Popen[bytes], http_url: str, timeout_s: float) -> str | None:
    """Poll ``http://<http_url>/v2/health/ready`` until it answers 200.

    Returns ``None`` once ready, else why it never was (the process exited, or the time ran
    out). Shared by every harness that starts a server process (tritonserver or ours).
    """
    return wait_http(process, f"http://{http_url}/v2/health/ready", timeout_s)


def run_perf_analyzer(
    model: str,
    url: str,
    protocol: str = "http",
    concurrency: int = 1,
    measurement_ms: int = 2000,
    extra_args: Sequence[str] = (),
    *,
    peers: Peers | None = None,
    timeout_s: float = 180.0,
) -> tuple[int, str]:
    """Run perf_analyzer against ``url`` (``host:port``); return its exit code and output.

    On timeout the process is killed and the exit code is 124, as with ``timeout(1)``.
    """
    peers = peers or prepare()
    if peers.perf_analyzer is None:
        raise PeersUnavailable("the tritonclient wheel has no perf_analyzer for this platform")
    command = [
        str(peers.perf_analyzer), "-m", model, "-u", url, "-i", protocol,
        f"--concurrency-range={concurrency}:{concurrency}",
        f"--measurement-interval={measurement_ms}", *extra_args,
    ]  # fmt: skip
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=peers.child_env(),
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout or ""
        text = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
        return 124, f"{text}\nperf_analyzer timed out after {timeout_s:.0f}s"
    return result.returncode, result.stdout + result.stderr


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["prepare"], help="download and lay out the peers")
    parser.add_argument("--dir", type=Path, default=None, help=f"cache folder (${PEERS_DIR_ENV})")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        peers = prepare(args.dir)
    except PeersUnavailable as error:
        kind = "registry unreachable" if error.offline else "failed"
        print(f"peers: prepare {kind}: {error}", file=sys.stderr)
        return 1
    print(f"peers ready in {time.monotonic() - started:.1f}s under {peers.root}")
    print(f"tritonserver     {peers.tritonserver}  (Triton {TRITON_VERSION})")
    print(f"backend dir      {peers.backend_dir}")
    print(f"perf_analyzer    {peers.perf_analyzer}")
    print(f"stub python3     {peers.stub_python_bin / 'python3'}  (numpy<2)")
    for name, value in peers.env.items():
        print(f"{name:<16} {value}  (prepended)")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
