"""``02_tune_batching.ipynb`` run in JupyterLab in headless Chromium (Playwright): "Run All",
the live sweep seen part way (fewer points than configurations times concurrencies) and then
filled, the finished sweep without its Stop button.

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
#: the notebook's sweep: 2 batch sizes x 2 delays (one curve each) x 2 concurrencies
CURVES, POINTS = 4, 8
#: the live sweep's state as the browser shows it, once it is part way: its status line reads
#: "k/n measurements" with 0 < k < n (ipywidgets' Label) and its plotly figure has rendered
PART_WAY = r"""() => {
  for (const output of document.querySelectorAll('.jp-OutputArea-output')) {
    const label = [...output.querySelectorAll('.widget-label')]
      .map(node => node.textContent.match(/^(\d+)\/(\d+) measurements/))
      .find(Boolean);
    const plot = output.querySelector('.js-plotly-plot');
    if (!label || !plot) continue;
    const [done, total] = [Number(label[1]), Number(label[2])];
    if (done === 0 || done >= total) return null;
    return {
      done, total,
      curves: plot.querySelectorAll('.scatterlayer .trace').length,
      points: plot.querySelectorAll('.scatterlayer .point').length,
    };
  }
  return null;
}"""


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
    # part way through the sweep the live figure has fewer points than it will have
    part_way = page.wait_for_function(PART_WAY, timeout=240_000).json_value()
    assert part_way["total"] == POINTS, part_way
    assert part_way["points"] < POINTS and part_way["curves"] <= CURVES, part_way
    running = page.locator(".jp-OutputArea-output", has=page.locator(".js-plotly-plot")).first
    running.screenshot(path=str(screenshots / "tune_notebook_running.png"))
    # the last cell prints the saved file's name only when every cell before passed
    saved = page.get_by_text("'linear_onnx_sweep.json'")
    expect(saved).to_be_visible(timeout=240_000)
    saved.scroll_into_view_if_needed()  # the notebook's end (the picture above scrolled away)
    page.screenshot(path=str(screenshots / "tune_notebook.png"), full_page=True)
    # the editor form (ipywidgets) and its pbtxt view
    expect(page.get_by_text("max_queue_delay_us").first).to_be_visible()
    # the finished sweep: a full bar, every curve and point, and no Stop button left
    sweep = page.locator(".jp-OutputArea-output", has_text=f"done: {POINTS} measurements")
    expect(sweep).to_have_count(1)
    expect(sweep.locator(".progress")).to_be_visible()
    expect(sweep.locator("button", has_text="Stop")).to_be_hidden()
    live = sweep.locator(".js-plotly-plot")
    expect(live.locator(".scatterlayer .trace")).to_have_count(CURVES, timeout=60_000)
    expect(live.locator(".scatterlayer .point")).to_have_count(POINTS)
    expect(live.get_by_text("max_batch_size=8, max_queue_delay_microseconds=500")).to_be_visible()
    # the config apply_best wrote: a dynamic_batching left with defaults only is one line
    written = page.locator(".jp-OutputArea-output", has_text='platform: "onnxruntime_onnx"')
    assert "dynamic_batching {\n}" not in written.last.inner_text()
    # the notebook scrolls inside the page: bring the live sweep into view for its picture
    sweep.scroll_into_view_if_needed()
    page.screenshot(path=str(screenshots / "tune_notebook_sweep.png"))
    assert page.locator(".jp-OutputArea-output[data-mime-type*='error']").count() == 0
