"""The notebook layer: the ``Workbench`` facade and the config editor widget.

Nothing else in the library imports this package. pandas and ipywidgets are imported only
when a DataFrame or a widget is asked for.
"""

from __future__ import annotations

from workbench.notebook.config_editor import ConfigEditor
from workbench.notebook.trace_view import TraceReport
from workbench.notebook.workbench import Workbench

__all__ = ["ConfigEditor", "TraceReport", "Workbench"]
