"""``02_tune_batching.ipynb`` run in JupyterLab in headless Chromium (Playwright).

Deselected in CI (marker ``browser``). Locally it needs Debian's chromium
(``apt-get install chromium``, used at /usr/bin/chromium or ``$WORKBENCH_CHROMIUM``) and the
``playwright`` Python package (``pip install playwright``; no ``playwright install``: the
browser is the system one). Run with ``python -m pytest tests/browser -m browser``.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "02_tune_batching.ipynb"
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM", "/usr/bin/chromium")
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


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    """JupyterLab on loopback over a scratch folder holding a copy of the notebook (so that
    autosave never touches the repository) and a link to the example repository."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.importorskip("playwright.sync_api")
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, tmp_path / "notebooks" / NOTEBOOK)
    (tmp_path / "model_repository").symlink_to(ROOT / "model_repository")
    # Render every cell (JupyterLab 4 only renders those in view by default), no news prompt.
    settings = tmp_path / "settings" / "@jupyterlab"
    (settings / "notebook-extension").mkdir(parents=True)
    (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none"}'
    )
    (settings / "apputils-extension").mkdir()
    (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false"}'
    )
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        PYTHONPATH=str(ROOT),
    )
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path / 'notebooks'}",
        "--ServerApp.open_browser=False", "--allow-root",
    ]  # fmt: skip
    log = (tmp_path / "lab.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_for_http(f"http://127.0.0.1:{port}/api/status?token={token}", process, 120)
        yield f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={token}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def _accept_kernel_dialog(page: Any) -> None:
    """JupyterLab may ask which kernel to start; the notebook's own (python3) is preselected."""
    select = page.get_by_role("dialog").get_by_role("button", name="Select", exact=True)
    try:
        select.wait_for(timeout=10_000)
    except Exception:  # no dialog this time
        return
    select.click()


def test_tune_notebook_renders_editor_live_figure_and_progress(lab: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(lab)
            page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for(timeout=120_000)
            expect(
                page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")
            ).to_have_count(1, timeout=120_000)
            _accept_kernel_dialog(page)
            page.get_by_role("menuitem", name="Run", exact=True).click()
            page.get_by_text("Run All Cells", exact=True).click()
            # the last cell prints the saved file's name only when every cell before passed
            expect(page.get_by_text("'linear_onnx_sweep.json'")).to_be_visible(timeout=240_000)
            page.screenshot(path=str(tmp_path / "notebook.png"), full_page=True)
            # the editor form (ipywidgets) and its pbtxt view
            expect(page.get_by_text("max_queue_delay_us").first).to_be_visible()
            # the live sweep: a progress bar and a FigureWidget with one trace per config
            sweep = page.locator(".jp-OutputArea-output", has_text="done: 8 measurements")
            expect(sweep).to_have_count(1)
            expect(sweep.locator(".progress")).to_be_visible()
            expect(sweep.get_by_role("button", name="Stop")).to_be_disabled()
            live = sweep.locator(".js-plotly-plot")
            expect(live.locator(".scatterlayer .trace")).to_have_count(4, timeout=60_000)
            expect(
                live.get_by_text("max_batch_size=8, max_queue_delay_microseconds=500")
            ).to_be_visible()
            assert page.locator(".jp-OutputArea-output[data-mime-type*='error']").count() == 0
        finally:
            browser.close()
