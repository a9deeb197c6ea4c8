"""The live view of a running sweep: a plotly ``FigureWidget`` whose curves grow as points
finish, a progress bar with ETA, and a Stop button.

A thin view over ``SweepResult``: it listens to the sweep's progress (reported on the sweep's
own thread, so it only sets widget values, inside ``hold_sync``) and Stop calls
``result.stop()``. The kernel's thread never waits for the sweep, so Stop stays clickable.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from workbench.bench.figure import add_point, latency_figure
from workbench.errors import MissingDependencyError

if TYPE_CHECKING:
    from workbench.bench import Progress, SweepResult

#: the fewest seconds between two redraws of the status line (the figure grows every point)
MIN_REDRAW_S = 0.25


def _widgets() -> Any:
    try:
        import ipywidgets
    except ImportError:
        raise MissingDependencyError("ipywidgets", "notebook") from None
    return ipywidgets


def eta_text(done: int, total: int, eta_s: float) -> str:
    """``3/12 measurements, ETA 20 s`` (no ETA before the first one)."""
    head = f"{done}/{total} measurements"
    if done == 0 or math.isnan(eta_s):
        return head
    return f"{head}, ETA {eta_s:.0f} s"


class SweepView:
    """Widgets showing one sweep; ``root`` is what a notebook displays."""

    def __init__(self, total: int, title: str = "") -> None:
        w = _widgets()
        self.figure = latency_figure(widget=True)
        if title:
            self.figure.layout.title = title
        self.progress = w.IntProgress(value=0, min=0, max=total, description="sweep")
        self.status = w.Label(value=eta_text(0, total, float("nan")))
        self.stop_button = w.Button(description="Stop", button_style="danger", icon="stop")
        self.root = w.VBox([w.HBox([self.progress, self.status, self.stop_button]), self.figure])
        self._result: SweepResult | None = None
        self._last_redraw = 0.0
        self.stop_button.on_click(self._stop_clicked)

    def attach(self, result: SweepResult) -> None:
        """Follow ``result``: Stop stops it, and its end shows in the status line."""
        self._result = result
        result.on_finish(self.finished)

    def _stop_clicked(self, _button: Any) -> None:
        if self._result is not None:
            self._result.stop()
            self.status.value = "stopping after the current measurement..."

    def update(self, progress: Progress) -> None:
        """One more measured row (called on the sweep's thread)."""
        add_point(self.figure, progress.row)
        now = time.monotonic()
        last = progress.done == progress.total
        if not last and now - self._last_redraw < MIN_REDRAW_S:
            self.progress.value = progress.done
            return
        self._last_redraw = now
        with self.root.hold_sync():
            self.progress.value = progress.done
            self.status.value = eta_text(progress.done, progress.total, progress.eta_s)

    def finished(self, result: SweepResult) -> None:
        """Show how the sweep ended. Stop goes: a faded red button beside "done" reads as a
        sweep still running."""
        kept = _measurements(len(result.rows))
        with self.root.hold_sync():
            self.stop_button.disabled = True
            self.stop_button.layout.display = "none"
            self.progress.value = len(result.rows)
            if result.error is not None:
                self.progress.bar_style = "danger"
                self.status.value = f"failed: {result.error}"
            elif result.stop_event.is_set():
                self.progress.bar_style = "warning"
                self.status.value = f"stopped: {kept} kept"
            else:
                self.progress.bar_style = "success"
                self.status.value = f"done: {kept}"


def _measurements(count: int) -> str:
    return f"{count} measurement" if count == 1 else f"{count} measurements"


__all__ = ["MIN_REDRAW_S", "SweepView", "eta_text"]
