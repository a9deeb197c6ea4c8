"""Installing the distribution enables the extension; importing ``workbench`` stays light."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path("jupyter_server_config.d") / "workbench.json"


def test_the_install_puts_the_enabling_file_into_the_environment() -> None:
    """``pip install -e .`` (the test command's install) as much as a wheel: setup.py's fix."""
    installed = Path(sys.prefix) / "etc" / "jupyter" / CONFIG
    assert installed.is_file(), f"{installed} is missing: reinstall with pip install -e ."
    expected = {"ServerApp": {"jpserver_extensions": {"workbench": True}}}
    assert json.loads(installed.read_text()) == expected
    assert json.loads((ROOT / "jupyter-config" / CONFIG).read_text()) == expected


def test_jupyter_lists_the_extension_enabled_and_valid() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter", "server", "extension", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)
    assert re.search(r"^\s*workbench enabled$", text, re.MULTILINE), text
    assert re.search(r"^\s*workbench \S+ OK$", text, re.MULTILINE), text


def test_importing_workbench_imports_no_jupyter_server() -> None:
    code = (
        "import sys, workbench, workbench.jupyter, workbench.notebook.discovery;"
        "points = workbench.__dict__['_jupyter_server_extension_points'];"
        "print(sorted(m for m in ('jupyter_server', 'tornado') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
