"""Everything about the build is in pyproject.toml, except two things.

**Data files in editable installs.** setuptools' editable wheels leave out ``data-files``
(pypa/setuptools#3399): ``editable_wheel`` installs the data category only when the
distribution answers ``has_data()``, a method it does not have. So ``pip install -e .`` never
installed ``etc/jupyter/jupyter_server_config.d/workbench.json``, the file that enables the
Jupyter server extension (a regular wheel always did). ``DistributionWithData`` answers it.

**The JupyterLab front end, prebuilt.** ``extensions/labextension/`` is TypeScript. The
``build_labextension`` step (the first of ``build``, so ``pip wheel .``, ``pip install .`` and
``pip install -e .`` all run it) builds it with npm and jupyter-builder when the built files
are missing or older than the sources, and adds them to the data files under
``share/jupyter/labextensions/triton-workbench-labextension/``, where JupyterLab finds
prebuilt extensions: users of the wheel need no Node.js. Building needs Node.js 20+ and npm;
``WORKBENCH_SKIP_LABEXTENSION=1`` builds without the panel.

**The native gRPC front end.** ``workbench/server/grpc/_native.cpp`` is built against gRPC's
C++ library where ``pkg-config`` finds it (Debian: ``apt-get install libgrpc++-dev
pkg-config``). It is optional: without the library, or when its build fails, the package
installs without it and the server speaks gRPC through grpcio's Python server instead
(``workbench/server/grpc/native.py`` says which one runs). ``WORKBENCH_SKIP_NATIVE_GRPC=1``
leaves it out.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Command, Extension, setup
from setuptools.command.build import build
from setuptools.dist import Distribution
from setuptools.errors import SetupError

HERE = Path(__file__).resolve().parent
SOURCE = Path("extensions", "labextension")  # relative: data-files paths must be
PACKAGE = json.loads((HERE / SOURCE / "package.json").read_text())
BUILT = SOURCE / PACKAGE["jupyterlab"]["outputDir"]
TARGET = Path("share", "jupyter", "labextensions", PACKAGE["name"])
#: what the build reads; a newer one than the built package.json means rebuild
INPUTS = ("src", "style", "package.json", "package-lock.json", "tsconfig.json")


class DistributionWithData(Distribution):
    def has_data(self) -> bool:
        return bool(self.has_data_files())


class BuildLabextension(Command):
    """Build the JupyterLab extension when stale, and install it as data files."""

    description = "build the JupyterLab extension (npm) and add it to the data files"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        if os.environ.get("WORKBENCH_SKIP_LABEXTENSION") == "1":
            self.announce("WORKBENCH_SKIP_LABEXTENSION=1: no JupyterLab panel", level=3)
            return
        if _stale():
            _build_labextension()
        files = _data_files()
        # in place: install_data may already hold this list
        self.distribution.data_files = self.distribution.data_files or []
        known = set(map(str, self.distribution.data_files))
        self.distribution.data_files.extend(f for f in files if str(f) not in known)


class BuildWithLabextension(build):
    sub_commands = [("build_labextension", None), *build.sub_commands]


def _newest_input() -> float:
    times = []
    for name in INPUTS:
        path = HERE / SOURCE / name
        paths = path.rglob("*") if path.is_dir() else [path]
        times += [p.stat().st_mtime for p in paths if p.is_file()]
    return max(times)


def _stale() -> bool:
    marker = HERE / BUILT / "package.json"
    return not marker.is_file() or marker.stat().st_mtime < _newest_input()


def _build_labextension() -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError(
            "building the JupyterLab extension (extensions/labextension) needs Node.js 20+ "
            "and npm on PATH; install them, or set WORKBENCH_SKIP_LABEXTENSION=1 to build "
            "without the JupyterLab panel"
        )
    folder = HERE / SOURCE
    installed = folder / "node_modules" / ".package-lock.json"
    lock = folder / "package-lock.json"
    if not installed.is_file() or installed.stat().st_mtime < lock.stat().st_mtime:
        _run([npm, "ci", "--no-audit", "--no-fund"], folder)
    shutil.rmtree(HERE / BUILT, ignore_errors=True)
    _run([npm, "run", "clean"], folder)
    _run([npm, "run", "build:lib:prod"], folder)
    # this interpreter's jupyter-builder: the build environment's, not one on PATH
    _run([sys.executable, "-m", "jupyter_builder.main", "build", "."], folder)


def _run(command: list[str], folder: Path) -> None:
    print(f"[labextension] {' '.join(command)}", flush=True)
    subprocess.run(command, cwd=folder, check=True)


def _data_files() -> list[tuple[str, list[str]]]:
    """``(target folder, [files])`` for the built extension and its ``install.json``."""
    built = HERE / BUILT
    if not (built / "package.json").is_file():
        raise SetupError(f"the JupyterLab extension was not built into {BUILT}")
    files = [(TARGET.as_posix(), [(SOURCE / "install.json").as_posix()])]
    for folder in sorted({p.parent for p in built.rglob("*") if p.is_file()}):
        inside = folder.relative_to(built)
        names = sorted(p for p in folder.iterdir() if p.is_file())
        files.append(
            (
                (TARGET / inside).as_posix(),
                [(BUILT / inside / p.name).as_posix() for p in names],
            )
        )
    return files


def _native_grpc() -> list[Extension]:
    """The native gRPC front end's extension, where gRPC's C++ library is installed."""
    if os.environ.get("WORKBENCH_SKIP_NATIVE_GRPC") == "1":
        return []
    try:
        flags = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "grpc++"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        print("[native gRPC] no grpc++ (pkg-config): gRPC is served by grpcio", flush=True)
        return []
    return [
        Extension(
            "workbench.server.grpc._native",
            ["workbench/server/grpc/_native.cpp"],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", *[f for f in flags if not f.startswith("-l")]],
            extra_link_args=[f for f in flags if not f.startswith("-I")],
            # a failed build leaves the package without it, not the install failed
            optional=True,
        )
    ]


setup(
    ext_modules=_native_grpc(),
    distclass=DistributionWithData,
    cmdclass={"build": BuildWithLabextension, "build_labextension": BuildLabextension},
)
