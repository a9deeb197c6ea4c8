"""``02_tune_batching.ipynb`` run in JupyterLab in headless Chromium (Playwright).

What it needs and how to run it: ``tests/browser/conftest.py``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ROOT, Lab

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]

NOTEBOOK = "02_tune_batching.ipynb"


@pytest.fixture
def lab(tmp_path: Path, start_lab: Callable[..., Lab]) -> str:
    """JupyterLab over a scratch folder holding a copy of the notebook (so that autosave
    never touches the repository) and, beside it, a link to the example repository."""
    (tmp_path / "notebooks").mkdir()
    shutil.copy(ROOT / "notebooks" / NOTEBOOK, tmp_path / "notebooks" / NOTEBOOK)
    (tmp_path / "model_repository").symlink_to(ROOT / "model_repository")
    return start_lab(tmp_path / "notebooks").url(f"lab/tree/{NOTEBOOK}")


def _accept_kernel_dialog(page: Any) -> None:
    """JupyterLab may ask which kernel to start; the notebook's own (python3) is preselected."""
    select = page.get_by_role("dialog").get_by_role("button", name="Select", exact=True)
    try:
        select.wait_for(timeout=10_000)
    except Exception:  # no dialog this time
        return
    select.click()


def test_tune_notebook_renders_editor_live_figure_and_progress(
    lab: str, page: Any, screenshots: Path
) -> None:
    from playwright.sync_api import expect

    page.goto(lab)
    page.locator(".jp-NotebookPanel .jp-Notebook").first.wait_for(timeout=120_000)
    expect(page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']")).to_have_count(
        1, timeout=120_000
    )
    _accept_kernel_dialog(page)
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_text("Run All Cells", exact=True).click()
    # the last cell prints the saved file's name only when every cell before passed
    expect(page.get_by_text("'linear_onnx_sweep.json'")).to_be_visible(timeout=240_000)
    page.screenshot(path=str(screenshots / "tune_notebook.png"), full_page=True)
    # the editor form (ipywidgets) and its pbtxt view
    expect(page.get_by_text("max_queue_delay_us").first).to_be_visible()
    # the live sweep: a progress bar and a FigureWidget with one trace per config
    sweep = page.locator(".jp-OutputArea-output", has_text="done: 8 measurements")
    expect(sweep).to_have_count(1)
    expect(sweep.locator(".progress")).to_be_visible()
    expect(sweep.get_by_role("button", name="Stop")).to_be_disabled()
    live = sweep.locator(".js-plotly-plot")
    expect(live.locator(".scatterlayer .trace")).to_have_count(4, timeout=60_000)
    expect(live.get_by_text("max_batch_size=8, max_queue_delay_microseconds=500")).to_be_visible()
    # the notebook scrolls inside the page: bring the live sweep into view for its picture
    sweep.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "tune_notebook_sweep.png"))
    assert page.locator(".jp-OutputArea-output[data-mime-type*='error']").count() == 0
