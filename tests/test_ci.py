"""The test command itself (``.ci/test``): what it lints is the project's own code.

A user's scratch notebook or script in the checkout is theirs; it must not turn the project's
test command red (issue #14). The command runs ``ruff check .`` and ``ruff format --check .``;
``[tool.ruff] include`` in ``pyproject.toml`` scopes both to the project's folders.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNLINTABLE = "import os, sys\nx=1\n"


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "ruff", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_scratch_file_in_the_checkout_does_not_fail_the_lint() -> None:
    scratch = ROOT / f"scratch_{uuid.uuid4().hex}.py"
    scratch.write_text(UNLINTABLE)
    try:
        assert _ruff("check", str(scratch)).returncode != 0  # the file itself is bad ...
        check, fmt = _ruff("check", "."), _ruff("format", "--check", ".")
    finally:
        scratch.unlink()
    assert check.returncode == 0, check.stdout  # ... yet the project's lint passes
    assert fmt.returncode == 0, fmt.stdout


def test_the_project_code_is_still_linted() -> None:
    listed = _ruff("check", ".", "--show-files").stdout
    for folder in ("workbench", "tests", "benchmarks"):
        assert f"{ROOT / folder}/" in listed, folder
    assert f"{ROOT / 'notebooks'}/01_quickstart.ipynb" in listed
    assert "test_ci.py" in listed
