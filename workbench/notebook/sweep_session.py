"""``Workbench.sweep``: check the request, start the sweep, and show it live in a notebook.

In a kernel (with ipywidgets and plotly) the sweep runs on its own thread and this returns at
once with the running ``SweepResult``, shown as a ``SweepView``; elsewhere (plain python,
``live=False``) it blocks and returns the finished result. Both run the same code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from workbench.bench import Endpoints, SweepResult
from workbench.bench.runner import SweepSpec
from workbench.bench.sweep import start
from workbench.bench.synthetic_inputs import synthesize_inputs

if TYPE_CHECKING:
    from workbench.notebook.workbench import Workbench


def in_kernel() -> bool:
    """Whether this runs in a Jupyter kernel that can show widgets."""
    try:
        import ipywidgets  # noqa: F401
        import plotly  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _check_inputs(
    bench: Workbench,
    name: str,
    inputs: Mapping[str, Any] | None,
    shapes: Mapping[str, Sequence[int]] | None,
) -> None:
    """Fail now, in the caller's cell, when request inputs cannot be made for the model."""
    if not any(
        entry.get("name") == name and entry.get("state") == "READY" for entry in bench.http.index()
    ):
        return  # the sweep reports it per point
    metadata = bench.http.metadata(name)
    config = bench.http.config(name)
    synthesize_inputs(metadata, max_batch_size=config.max_batch_size, inputs=inputs, shapes=shapes)


def run_sweep(bench: Workbench, spec: SweepSpec, *, live: bool | None = None) -> SweepResult:
    """Run ``spec`` on ``bench`` (see ``Workbench.sweep``): shown live in a kernel."""
    _check_inputs(bench, spec.model, spec.inputs, spec.shapes)
    # a remote server cannot read a scratch copy written here: points load as overrides
    repository = None if bench.remote else bench.repository
    endpoints = Endpoints(bench.server.http_address, repository, bench.grpc_url)
    if not (in_kernel() if live is None else live):
        return start(spec, endpoints, wait=True, bench=bench)
    from IPython.display import display

    from workbench.notebook.sweep_view import SweepView

    title = f"sweep of '{spec.model}': p99 latency vs throughput"
    view = SweepView(spec.measurements, title=title)
    result = start(spec, endpoints, listeners=[view.update], wait=False, bench=bench)
    view.attach(result)
    display(view.root)
    return result


__all__ = ["in_kernel", "run_sweep"]
