"""The wheel carries the JupyterLab extension prebuilt, so its users need no Node.js (#13).

The wheel is built from this tree as ``pip wheel .`` builds it (``setup.py`` builds the
TypeScript when the built files are missing or stale: Node.js and npm are needed then). It
must hold the prebuilt extension where JupyterLab looks for one,
``share/jupyter/labextensions/<name>/`` (``package.json``, the ``static/remoteEntry.*.js``
it names, ``install.json``), and the file that enables the server extension. Installed alone
into a scratch prefix, JupyterLab lists the extension enabled from there, and the
server extension is enabled by the config folder it brings.
"""

from __future__ import annotations

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
    prefix = tmp_path / "prefix"
    # --ignore-installed: without it pip would uninstall this environment's own install
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed"]
    subprocess.run([*install, "--prefix", str(prefix), str(wheel)], check=True, timeout=300)
    env = dict(os.environ, JUPYTER_PATH=str(prefix / "share/jupyter"))
    lab = _run([sys.executable, "-m", "jupyterlab.labextensions", "list"], env)
    listed = _section(lab, str(prefix / "share/jupyter/labextensions"))
    listing = f"{LABEXTENSION} v{PACKAGE['version']} enabled OK (python, triton-workbench)"
    assert listing in listed, lab
    # what `jupyter server extension list` reads in each config folder
    from jupyter_server.extension.config import ExtensionConfigManager

    config = ExtensionConfigManager(read_config_path=[str(prefix / "etc/jupyter")])
    assert config.get_jpserver_extensions() == {"workbench": True}


def _run(command: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return " ".join(ANSI.sub("", done.stdout + done.stderr).split())


def _section(listing: str, folder: str) -> str:
    """The part of a ``list`` output from ``folder``'s heading to the next heading."""
    assert folder in listing, listing
    return listing.split(folder, 1)[1].split(" /", 1)[0]
