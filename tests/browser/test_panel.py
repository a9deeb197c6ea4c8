"""The JupyterLab panel (``extensions/labextension``) in headless Chromium, end to end.

JupyterLab starts on a scratch root holding a copy of ``model_repository/`` and one more
model that fails to load; the server extension serves it. Through the browser only: the
command palette entry and the launcher card open the panel, the example models are READY and
the broken one says why it is not, the copy buttons put the URL and the client snippet on the
clipboard, one model is unloaded and loaded again from its row, its config opens in an
editor, a broken save shows the problems at their lines, "Tune in a notebook" writes the
attach cell and then a sweep cell, and a ``%%pbtxt`` cell shows its diff. What it needs:
``conftest.py``.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ROOT, Lab

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]

MODELS = (
    "linear_onnx",
    "linear_torchscript",
    "postprocess",
    "preprocess",
    "text_classifier",
    "text_python",
)
MODEL = "linear_onnx"
#: ``linear_onnx`` with an input shape its graph does not have: it fails to load, and the
#: panel shows the reason the server gives
BROKEN = "wrong_dims"
#: two problems: an output dimension of 0 (line 8, inside the ``output [`` block of line 7),
#: and a preferred batch size above max_batch_size (line 10)
BREAKS = (
    ("data_type: TYPE_FP32 dims: [ 3 ]", "data_type: TYPE_FP32 dims: [ 0 ]"),
    (
        "dynamic_batching { max_queue_delay_microseconds: 100 }",
        "dynamic_batching { max_queue_delay_microseconds: 100 preferred_batch_size: [ 16 ] }",
    ),
)


@pytest.fixture
def lab(tmp_path: Path, start_lab: Callable[..., Lab]) -> Lab:
    root = tmp_path / "root"
    shutil.copytree(ROOT / "model_repository", root / "model_repository")
    broken = shutil.copytree(ROOT / "model_repository" / MODEL, root / "model_repository" / BROKEN)
    config = (broken / "config.pbtxt").read_text()
    assert "dims: [ 4 ]" in config
    config = config.replace(f'"{MODEL}"', f'"{BROKEN}"').replace("dims: [ 4 ]", "dims: [ 5 ]")
    (broken / "config.pbtxt").write_text(config)
    return start_lab(root)


def _status(lab: Lab) -> dict[str, Any]:
    with urllib.request.urlopen(lab.url("workbench/api/status"), timeout=10) as reply:
        return dict(json.loads(reply.read()))


@pytest.fixture
def traffic(lab: Lab) -> Iterator[Callable[[], None]]:
    """``traffic()`` starts requests to ``linear_onnx`` (a few a second, until the test
    ends) straight to the model server, so that its sparklines have something to draw."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def infer_loop(address: str) -> None:
        body = json.dumps(
            {
                "inputs": [
                    {"name": "INPUT", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}
                ]
            }  # fmt: skip
        ).encode()
        url = f"http://{address}/v2/models/{MODEL}/infer"
        while not stop.is_set():
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(request, timeout=5).read()
            except OSError:
                pass  # unloaded for a moment by the test
            stop.wait(0.05)

    def start() -> None:
        address = _status(lab)["endpoints"]["http_address"]
        thread = threading.Thread(target=infer_loop, args=(address,), daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


def _replace_editor_text(page: Any, editor: Any, text: str) -> None:
    """Select all and insert (no typing: CodeMirror would auto-close brackets)."""
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)


def _run_cell(page: Any, cell: Any) -> None:
    """Run ``cell`` (Shift+Enter) and wait until the kernel took it. A new notebook's kernel
    may still be connecting, and a cell run before that is dropped: then run it again."""
    for _attempt in range(6):
        cell.locator(".cm-content").click()
        page.keyboard.press("Shift+Enter")
        try:
            page.wait_for_function(
                "prompt => !/\\[ \\]/.test(prompt.textContent)",
                arg=cell.locator(".jp-InputPrompt").element_handle(),
                timeout=10_000,
            )
            return
        except Exception:  # still "[ ]:": not sent
            continue
    raise AssertionError("the cell never ran")


def _run_in_new_cell(page: Any, source: str) -> Any:
    """Type ``source`` into the notebook's last cell, run it, return that cell."""
    cells = page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell")
    cell = cells.nth(cells.count() - 1)  # fixed: running it adds a cell below
    _replace_editor_text(page, cell.locator(".cm-content"), source)
    _run_cell(page, cell)
    return cell


def _clipboard(page: Any) -> str:
    return str(page.evaluate("navigator.clipboard.readText()"))


def _open_from_the_palette(page: Any) -> None:
    """Ctrl+Shift+C, search "Triton Workbench", pick the entry."""
    page.keyboard.press("Control+Shift+C")
    search = page.locator(".lm-CommandPalette-input")
    search.fill("Triton Workbench")
    page.locator(".lm-CommandPalette-item", has_text="Open Triton Workbench").click()


def test_panel_serves_reloads_checks_configs_and_tunes(
    lab: Lab, page: Any, screenshots: Path, traffic: Callable[[], None]
) -> None:
    from playwright.sync_api import expect

    started = time.monotonic()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.base)
    page.goto(lab.url("lab"))
    card = page.locator(".jp-LauncherCard", has_text="Triton Workbench")
    card.wait_for(timeout=120_000)
    panel = page.locator("#triton-workbench-panel")
    # the command palette entry opens the panel; another sidebar tab hides it again
    _open_from_the_palette(page)
    expect(panel).to_be_visible()
    page.locator(".jp-SideBar .lm-TabBar-tab[data-id='filebrowser']").click()
    expect(panel).to_be_hidden()
    # and the launcher card opens it
    card.click()
    expect(panel).to_be_visible()
    expect(panel.locator(".jp-TritonWorkbench-pill")).to_have_text("running", timeout=180_000)
    for name in MODELS:
        state = panel.locator(f"li[data-model='{name}'] .jp-TritonWorkbench-state")
        expect(state).to_have_text("READY", timeout=60_000)
    # a model that failed to load says why, in the error colour
    broken = panel.locator(f"li[data-model='{BROKEN}']")
    expect(broken.locator(".jp-TritonWorkbench-state")).to_have_text("UNAVAILABLE")
    expect(broken).to_have_class(re.compile(r"\bjp-mod-failed\b"))
    reason = broken.locator(".jp-TritonWorkbench-reason.jp-mod-error")
    expect(reason).to_contain_text("the model expects 2 dimensions (shape [-1,4])")
    broken.screenshot(path=str(screenshots / "panel_failed_model.png"))  # scrolls the panel
    panel.evaluate("node => node.scrollTo(0, 0)")
    expect(panel.locator(".jp-TritonWorkbench-endpoints")).to_contain_text("127.0.0.1:")
    # the copy buttons put the URL and the client code on the clipboard
    endpoints = _status(lab)["endpoints"]
    panel.get_by_role("button", name="Copy the HTTP URL").click()
    assert _clipboard(page) == endpoints["http_url"]
    snippet = panel.locator(".jp-TritonWorkbench-snippet").first
    snippet.get_by_role("button", name="Copy the code: tritonclient, on this machine").click()
    copied = _clipboard(page)
    assert snippet.evaluate("details => details.open") is False, "copy unfolded the snippet"
    assert copied.startswith("import tritonclient.http as httpclient\n")
    assert f'httpclient.InferenceServerClient("{endpoints["http_address"]}")' in copied
    snippet.locator("summary").click()
    code = snippet.locator("pre")
    expect(code).to_be_visible()
    expect(code).to_contain_text("InferenceServerClient(")
    # long lines scroll sideways instead of breaking an identifier in two
    assert code.evaluate("pre => getComputedStyle(pre).whiteSpace") == "pre"
    line_heights = code.locator(".jp-TritonWorkbench-codeLine").evaluate_all(
        "lines => lines.map(line => line.getBoundingClientRect().height)"
    )
    assert max(line_heights) < 1.5 * min(line_heights), line_heights  # no line wrapped

    # live statistics: throughput and p99 sparklines fill while requests arrive
    traffic()
    row = panel.locator(f"li[data-model='{MODEL}']")
    expect(row.locator(".jp-mod-throughput .jp-TritonWorkbench-sparklineLine")).to_have_count(
        1, timeout=30_000
    )
    expect(row.locator(".jp-TritonWorkbench-metricValue").first).to_contain_text("/s")
    page.wait_for_timeout(3000)  # a few more samples for the picture
    panel.screenshot(path=str(screenshots / "panel.png"))

    # unload, load and reload from the row
    row.get_by_role("button", name="Unload", exact=True).click()
    expect(row.locator(".jp-TritonWorkbench-state")).to_have_text("UNAVAILABLE", timeout=60_000)
    row.get_by_role("button", name="Load", exact=True).click()
    expect(row.locator(".jp-TritonWorkbench-state")).to_have_text("READY", timeout=60_000)
    with page.expect_response(lambda r: f"/models/{MODEL}/load" in r.url) as reload:
        row.get_by_role("button", name="Reload", exact=True).click()
    assert reload.value.ok
    expect(row.locator(".jp-TritonWorkbench-state")).to_have_text("READY", timeout=60_000)

    # the config in an editor tab, checked on open
    row.get_by_role("button", name="Config", exact=True).click()
    editor_tab = page.locator(".jp-FileEditor:visible")
    banner = page.locator(".jp-TritonWorkbench-banner:visible")
    expect(banner).to_contain_text("Valid", timeout=30_000)
    original = (lab.root / "model_repository" / MODEL / "config.pbtxt").read_text()
    broken = original
    for before, after in BREAKS:
        assert before in broken
        broken = broken.replace(before, after)
    # break it and save: the problems show at their lines, in the editor and the panel
    _replace_editor_text(page, editor_tab.locator(".cm-content"), broken)
    page.keyboard.press("Control+S")
    expect(banner).to_contain_text("2 problems", timeout=30_000)
    expect(banner).to_contain_text("line 8: output[0].dims")
    expect(banner).to_contain_text("line 10: dynamic_batching.preferred_batch_size")
    expect(editor_tab.locator(".jp-TritonWorkbench-problemLine")).to_have_count(2)
    problems = row.locator(".jp-TritonWorkbench-problems")
    expect(problems).to_contain_text("line 8: output[0].dims")
    expect(problems).to_contain_text("line 10")
    expect(page.locator(".Toastify__toast", has_text="2 problems")).to_be_visible()
    page.wait_for_timeout(1000)  # the toast slides in
    page.screenshot(path=str(screenshots / "config_problems.png"))
    # the served model is untouched (nothing reloads a refused config)
    expect(row.locator(".jp-TritonWorkbench-state")).to_have_text("READY")
    # put it back: valid again, the marks and the list go
    _replace_editor_text(page, editor_tab.locator(".cm-content"), original)
    page.keyboard.press("Control+S")
    expect(banner).to_contain_text("Saved and valid", timeout=30_000)
    expect(editor_tab.locator(".jp-TritonWorkbench-problemLine")).to_have_count(0)
    expect(problems).to_be_hidden()
    # the stale error toast goes; the success toast offers the reload
    expect(page.locator(".Toastify__toast", has_text="2 problems")).to_have_count(0)
    expect(page.locator(".Toastify__toast", has_text="is valid")).to_be_visible()
    page.wait_for_timeout(1000)  # the toast slides in
    page.screenshot(path=str(screenshots / "config_valid.png"))

    # "Tune in a notebook": a new notebook with the attach cell, run; then %%pbtxt
    row.get_by_role("button", name="Edit", exact=True).click()
    notebook = page.locator(".jp-NotebookPanel:visible")
    first = notebook.locator(".jp-Cell").first
    expect(first.locator(".cm-content")).to_contain_text("wb.Workbench.attach()", timeout=60_000)
    expect(first.locator(".cm-content")).to_contain_text(f'bench.edit("{MODEL}")')
    _run_cell(page, first)
    expect(first.locator(".jp-OutputArea-output").first).to_be_visible(timeout=60_000)
    _run_in_new_cell(page, "%load_ext workbench")
    changed = original.replace(
        "max_queue_delay_microseconds: 100", "max_queue_delay_microseconds: 200"
    )
    cell = _run_in_new_cell(page, f"%%pbtxt {MODEL}\n{changed}")
    output = cell.locator(".jp-OutputArea-output")
    expect(output).to_contain_text("+dynamic_batching { max_queue_delay_microseconds: 200 }")
    expect(output).to_contain_text("-dynamic_batching { max_queue_delay_microseconds: 100 }")
    expect(row.locator(".jp-TritonWorkbench-state")).to_have_text("READY", timeout=60_000)
    page.screenshot(path=str(screenshots / "notebook_pbtxt.png"))
    assert (
        "max_queue_delay_microseconds: 200"
        in (lab.root / "model_repository" / MODEL / "config.pbtxt").read_text()
    )
    assert page.locator(".jp-OutputArea-output[data-mime-type*='error']").count() == 0

    # the "Sweep" half of "Tune in a notebook": the sweep code goes into the empty cell at
    # the cursor (no cell is added), not run, and without a second attach (this notebook
    # attaches already)
    cells = notebook.locator(".jp-Cell")
    count = cells.count()
    row.get_by_role("button", name="Sweep", exact=True).click()
    sweep = cells.nth(count - 1)
    expect(sweep).to_have_class(re.compile(r"\bjp-mod-active\b"))
    source = sweep.locator(".cm-content")
    expect(source).to_contain_text("result = bench.sweep(")
    expect(source).to_contain_text(f'"{MODEL}",')
    expect(source).to_contain_text("max_queue_delay_microseconds=[0, 500],")
    expect(source).not_to_contain_text("Workbench.attach()")
    expect(sweep.locator(".jp-InputPrompt")).to_have_text("[ ]:")
    expect(cells).to_have_count(count)
    page.screenshot(path=str(screenshots / "notebook_sweep_cell.png"))

    # the dark theme: the panel uses only theme variables
    page.get_by_role("menuitem", name="Settings", exact=True).click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Theme", exact=True).click()
    page.locator(".lm-Menu-itemLabel").get_by_text("JupyterLab Dark", exact=True).click()
    expect(page.locator("body[data-jp-theme-light='false']")).to_have_count(1, timeout=30_000)
    page.wait_for_timeout(1000)
    panel.evaluate("node => node.scrollTo(0, 0)")
    panel.screenshot(path=str(screenshots / "panel_dark.png"))
    print(f"panel test: {time.monotonic() - started:.0f} s in the browser")
