"""JupyterLab in headless Chromium (Playwright) for the browser tests (marker ``browser``).

They need Debian's chromium (``apt-get install chromium``; used at /usr/bin/chromium or
``$WORKBENCH_CHROMIUM``) and the ``playwright`` Python package (in the ``test`` extra; no
``playwright install``: the browser is the system one). ``.ci/test`` installs both. Run
``python -m pytest tests/browser -m browser``. Screenshots go to ``tests/browser/screenshots/``
(or ``$WORKBENCH_SCREENSHOTS``), kept as the run's artifacts.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(os.environ.get("WORKBENCH_SCREENSHOTS", ROOT / "tests/browser/screenshots"))
# Flags this sandbox needs: no sandbox as root, no GPU, and no background networking (the
# machine's closed network refuses those connections).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: ``url(path)`` gives an authenticated address on it."""

    base: str
    token: str
    root: Path
    log: Path

    def url(self, path: str = "lab") -> str:
        separator = "&" if "?" in path else "?"
        return f"{self.base}/{path}{separator}token={self.token}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_http(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"jupyter lab did not answer at {url} within {timeout_s} s")


def _write_settings(folder: Path) -> None:
    """Render every cell (JupyterLab 4 renders only those in view by default), no news."""
    settings = folder / "@jupyterlab"
    (settings / "notebook-extension").mkdir(parents=True)
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}'
    )
    (settings / "apputils-extension").mkdir()
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false"}'
    )


@pytest.fixture
def start_lab(tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    """``start_lab(root, *options)``: JupyterLab on loopback serving ``root``, with scratch
    settings, workspaces and runtime folders; stopped at the end of the test."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    started: list[tuple[subprocess.Popen[bytes], Any]] = []

    def start(root: Path, *options: str) -> Lab:
        state = tmp_path / f"lab-{len(started)}"
        _write_settings(state / "settings")
        port, token = _free_port(), secrets.token_hex(16)
        env = dict(
            os.environ,
            JUPYTERLAB_SETTINGS_DIR=str(state / "settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"),
            JUPYTER_RUNTIME_DIR=str(state / "runtime"),
            PYTHONPATH=str(ROOT),
        )
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1",
            f"--port={port}", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False", "--allow-root",
            *options,
        ]  # fmt: skip
        log_path = state / "lab.log"
        log = log_path.open("wb")
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        started.append((process, log))
        base = f"http://127.0.0.1:{port}"
        _wait_for_http(f"{base}/api/status?token={token}", process, 120)
        return Lab(base, token, root, log_path)

    yield start
    for process, log in started:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


@pytest.fixture
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


@pytest.fixture
def page(request: pytest.FixtureRequest, screenshots: Path) -> Iterator[Any]:
    """A Chromium page (1400x1000); a failing test leaves ``<test>-failed.png``."""
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            yield page
            report = getattr(request.node, "rep_call", None)
            if report is not None and report.failed:
                page.screenshot(path=str(screenshots / f"{request.node.name}-failed.png"))
        finally:
            browser.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item, so that ``page`` knows the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
