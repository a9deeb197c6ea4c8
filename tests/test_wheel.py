"""The wheel carries the JupyterLab extension prebuilt, so its users need no Node.js (#13).

The wheel is built from this tree as ``pip wheel .`` builds it (``setup.py`` builds the
TypeScript when the built files are missing or stale: Node.js and npm are needed then). It
must hold the prebuilt extension where JupyterLab looks for one,
``share/jupyter/labextensions/<name>/`` (``package.json``, the ``static/remoteEntry.*.js``
it names, ``install.json``), and the file that enables the server extension. Installed alone
into a clean venv (with what it requires from the package index: its ``notebook`` extra brings
jupyter_server and JupyterLab), that venv's ``jupyter server extension list`` and
``jupyter labextension list`` show both extensions enabled.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = json.loads((ROOT / "extensions/labextension/package.json").read_text())
LABEXTENSION = PACKAGE["name"]
#: colour codes in the listings
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SHARED = f"triton_workbench-{importlib.metadata.version('triton-workbench')}.data/data"
DATA = f"{SHARED}/share/jupyter/labextensions/{LABEXTENSION}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # the test command's environment already holds the build requirements (setuptools,
    # jupyter-builder): no isolated environment, so no download
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*command, "-q", "-w", str(out), str(ROOT)], check=True, timeout=600)
    (found,) = out.glob("triton_workbench-*.whl")
    return found


def test_the_wheel_holds_the_prebuilt_labextension(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        package = json.loads(archive.read(f"{DATA}/package.json"))
        install = json.loads(archive.read(f"{DATA}/install.json"))
    assert package["name"] == LABEXTENSION
    entry = package["jupyterlab"]["_build"]["load"]  # the remote entry JupyterLab loads
    assert entry.startswith("static/remoteEntry.") and f"{DATA}/{entry}" in names
    assert install["packageName"] == "triton-workbench"
    assert (
        "triton_workbench-0.1.0.data/data/etc/jupyter/jupyter_server_config.d/workbench.json"
        in names
    )
    # sources and build tooling stay out
    assert not [n for n in names if "node_modules" in n or n.endswith(".ts")]


def test_installed_alone_both_extensions_are_enabled(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    run = functools.partial(_run, env=_clean_env(venv, tmp_path), cwd=tmp_path)
    # --no-compile: no bytecode for its ~120 packages (about a quarter of the install's time)
    run([str(venv / "bin/pip"), "install", "-q", "--no-compile", f"{wheel}[notebook]"], 900)
    imported = run([str(venv / "bin/python"), "-c", "import workbench; print(workbench.__file__)"])
    assert imported.startswith(str(venv / "lib")), imported  # the wheel's, not this tree
    jupyter = str(venv / "bin/jupyter")
    server = _section(run([jupyter, "server", "extension", "list"]), str(venv / "etc/jupyter"))
    version = importlib.metadata.version("triton-workbench")
    assert f"workbench enabled - Validating workbench... workbench {version} OK" in server, server
    lab = _section(
        run([jupyter, "labextension", "list"]), str(venv / "share/jupyter/labextensions")
    )
    listing = f"{LABEXTENSION} v{PACKAGE['version']} enabled OK (python, triton-workbench)"
    assert listing in lab, lab


def _clean_env(venv: Path, home: Path) -> dict[str, str]:
    """This environment without what points at this tree or its Jupyter folders: ``venv``'s
    ``bin`` first on ``PATH``, Jupyter's user folders under ``home``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("JUPYTER", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["JUPYTER_CONFIG_DIR"] = str(home / "jupyter-config")
    env["JUPYTER_DATA_DIR"] = str(home / "jupyter-data")
    return env


def _run(command: list[str], timeout_s: float = 120.0, *, env: dict[str, str], cwd: Path) -> str:
    """Its output on one line, colours removed (away from this tree: ``cwd``)."""
    done = subprocess.run(
        command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return " ".join(ANSI.sub("", done.stdout + done.stderr).split())


def _section(listing: str, folder: str) -> str:
    """The part of a ``list`` output from ``folder``'s heading to the next heading."""
    assert folder in listing, listing
    return listing.split(folder, 1)[1].split(" /", 1)[0]
