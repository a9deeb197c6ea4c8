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
]
#: the pause between cells when a user runs them one by one (a sweep goes on meanwhile)
PAUSE_S = 2.0


def _client(name: str) -> tuple[object, nbclient.NotebookClient]:
    if name == "04_from_torch.ipynb":
        pytest.importorskip("torch")
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=240,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    return notebook, client


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_headless(name: str) -> None:
    """As "Run All": each cell starts as soon as the one before it ends."""
    notebook, client = _client(name)
    client.execute()  # raises CellExecutionError with the failing cell and its traceback
    _check_outputs(name, notebook)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_cell_by_cell_with_pauses(name: str) -> None:
    """As a user runs it: one cell, a pause (background work such as a sweep goes on), the
    next; the same outputs as "Run All"."""
    notebook, client = _client(name)
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


def test_promote_notebook_verifies_on_real_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    """05_promote.ipynb with real tritonserver found through ``$WORKBENCH_TRITONSERVER``."""
    from tests.integration.peers import PeersUnavailable, prepare

    try:
        monkeypatch.setenv("WORKBENCH_TRITONSERVER", str(prepare().tritonserver))
    except PeersUnavailable as error:
        pytest.skip(f"real tritonserver unavailable: {str(error).splitlines()[-1]}")
    notebook = nbformat.read(NOTEBOOKS / "05_promote.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=240,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()  # the cells assert that both python models passed on real Triton
    text = "".join(
        o.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for o in cell.outputs
    )
    assert "verified on tritonserver 2.51.0" in text


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
