"""The example notebooks run top to bottom headless; their cells carry the assertions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

pytestmark = [pytest.mark.notebook, pytest.mark.integration, pytest.mark.slow]


NAMES = [
    "01_quickstart.ipynb",
    "02_tune_batching.ipynb",
    "03_ensemble.ipynb",
    "04_from_torch.ipynb",
    "05_promote.ipynb",
]
#: the pause between cells when a user runs them one by one (a sweep goes on meanwhile)
PAUSE_S = 2.0


def _client(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[object, nbclient.NotebookClient]:
    if name == "04_from_torch.ipynb":
        pytest.importorskip("torch")
    if name == "05_promote.ipynb":
        _use_real_triton(monkeypatch)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=240,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    return notebook, client


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_headless(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As "Run All": each cell starts as soon as the one before it ends."""
    notebook, client = _client(name, monkeypatch)
    client.execute()  # raises CellExecutionError with the failing cell and its traceback
    _check_outputs(name, notebook)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_cell_by_cell_with_pauses(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a user runs it: one cell, a pause (background work such as a sweep goes on), the
    next; the same outputs as "Run All"."""
    notebook, client = _client(name, monkeypatch)
    with client.setup_kernel():
        for index, cell in enumerate(notebook.cells):  # type: ignore[attr-defined]
            client.execute_cell(cell, index)
            time.sleep(PAUSE_S if cell.cell_type == "code" else 0)
    _check_outputs(name, notebook)


def _check_outputs(name: str, notebook: Any) -> None:
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("text/html" in o.get("data", {}) for o in outputs)  # the Workbench display
    widget = "application/vnd.jupyter.widget-view+json"
    if name in ("01_quickstart.ipynb", "02_tune_batching.ipynb"):  # the editor, the live sweep
        assert sum(widget in o.get("data", {}) for o in outputs) >= (2 if "02" in name else 1)
    if name in ("02_tune_batching.ipynb", "03_ensemble.ipynb"):  # plotly figures
        assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs)
    if name == "05_promote.ipynb":  # its cells assert that both python models passed
        text = "".join(o.get("text", "") for o in outputs)
        assert "verified on tritonserver 2.51.0" in text


def _use_real_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel finds real tritonserver 2.51 through ``$WORKBENCH_TRITONSERVER``."""
    from tests.integration.peers import PeersUnavailable, prepare

    try:
        monkeypatch.setenv("WORKBENCH_TRITONSERVER", str(prepare().tritonserver))
    except PeersUnavailable as error:
        pytest.skip(f"real tritonserver unavailable: {str(error).splitlines()[-1]}")


def test_kernel_shutdown_stops_the_server(tmp_path: Path) -> None:
    from tests.notebook.conftest import copy_linear

    repository = tmp_path / "repo"
    copy_linear(repository, "linear")
    marker = tmp_path / "at_exit.txt"
    source = (
        "import atexit, pathlib\n"
        "from workbench.notebook import Workbench\n"
        "# registered before the bench's own hook, so it runs after it (atexit is LIFO)\n"
        f"atexit.register(lambda: pathlib.Path({str(marker)!r}).write_text(str(bench.running)))\n"
        f"bench = Workbench({str(repository)!r})\n"
        "assert bench.running"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    assert marker.read_text() == "False"  # the kernel shut down with the server stopped


def test_a_failed_infer_shows_one_short_block_in_a_notebook(tmp_path: Path) -> None:
    from tests.notebook.conftest import copy_linear

    repository = tmp_path / "repo"
    copy_linear(repository, "linear")
    cells = [
        "import numpy as np\nfrom workbench.notebook import Workbench",
        f"bench = Workbench({str(repository)!r})",
        'bench.infer("linear", {"WRONG": np.ones((1, 4), np.float32)})',
        "bench.stop()",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", allow_errors=True
    ).execute()
    (error,) = notebook.cells[2].outputs
    assert error.output_type == "error" and error.ename == "InvalidArgumentError"
    assert error.traceback[-1] == "hint: 'WRONG' is not an input; did you mean 'INPUT'?"
    assert len(error.traceback) < 12 and "workbench/notebook" not in "".join(error.traceback)
    assert not notebook.cells[3].outputs  # the kernel went on after the error


#: six measurements of one second: the interrupt comes while the second runs at the latest
SWEEP = 'result = bench.sweep("add", max_batch_size=[1, 8], concurrency=[1, 2, 4], duration_s=1)'
#: a later cell that reads the result while the sweep runs (once its first row is in)
READ_RUNNING = """
import time
import pandas  # imported before the print: from it on, only the wait is left
while not result.rows:
    time.sleep(0.02)
print("reading", flush=True)
frame = result.df
"""
#: after the interrupt: the rows measured, read again, flagged partial
READ_PARTIAL = """
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    frame = result.df
assert not result.running and result.partial and result.stop_event.is_set()
assert frame.attrs["partial"] is True and 1 <= len(frame) < 6, frame
assert [w.category.__name__ for w in caught] == ["PartialSweepWarning"]
assert "partial" in repr(result)
print(len(frame), (frame["error"] == "").all())
"""


def test_interrupting_the_kernel_while_a_cell_waits_for_a_sweep_keeps_its_rows(
    tmp_path: Path,
) -> None:
    """Jupyter's stop button (a real SIGINT to a real kernel) while a later cell reads
    ``result.df`` of a sweep that still runs: ``SweepInterrupted``, the sweep stops, the rows
    measured stay readable and say they are partial, and the kernel goes on."""
    from jupyter_client.manager import start_new_kernel

    from tests.core.conftest import write_add_model

    repository = tmp_path / "repo"
    write_add_model(repository, "add")
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        _run(kc, f"import workbench as wb\nbench = wb.Workbench({str(repository)!r})")
        _run(kc, SWEEP)
        # stop_on_error=False: else the kernel aborts the cells sent right after the error
        reading = kc.execute(READ_RUNNING, stop_on_error=False)
        _wait_for_output(kc, reading, "reading")
        time.sleep(0.3)  # into the wait inside result.df
        km.interrupt_kernel()
        reply = _reply(kc, reading)
        assert reply["status"] == "error" and reply["ename"] == "SweepInterrupted", reply
        assert "stopped by the interrupt" in reply["evalue"]
        rows, clean = _run(kc, READ_PARTIAL).split()
        assert 1 <= int(rows) < 6 and clean == "True"
        # the kernel and its server still work
        out = _run(kc, 'print(bench.infer("add", {"INPUT0": [[1, 2, 3, 4]]})["OUTPUT0"].tolist())')
        assert out.strip() == "[[2.0, 3.0, 4.0, 5.0]]"
        _run(kc, "bench.stop()")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run(kc: Any, code: str, timeout_s: float = 120.0) -> str:
    """Run ``code`` in the kernel; its standard output (an error fails the test)."""
    out: list[str] = []

    def hook(message: dict[str, Any]) -> None:
        if message["msg_type"] == "stream" and message["content"]["name"] == "stdout":
            out.append(message["content"]["text"])

    reply = kc.execute_interactive(code, timeout=timeout_s, output_hook=hook)
    content = reply["content"]
    assert content["status"] == "ok", "\n".join(content.get("traceback", [])) or content
    return "".join(out)


def _wait_for_output(kc: Any, msg_id: str, text: str, timeout_s: float = 120.0) -> None:
    """Read the kernel's output until the cell ``msg_id`` printed ``text``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = kc.get_iopub_msg(timeout=timeout_s)
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        content = message["content"]
        if message["msg_type"] == "error":
            raise AssertionError("\n".join(content["traceback"]))
        if message["msg_type"] == "stream" and text in content["text"]:
            return
    raise AssertionError(f"the cell did not print {text!r}")


def _reply(kc: Any, msg_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """The execute reply of the cell ``msg_id``."""
    while True:
        message = kc.get_shell_msg(timeout=timeout_s)
        if message["parent_header"].get("msg_id") == msg_id:
            return dict(message["content"])
