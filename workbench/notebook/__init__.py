"""The notebook layer: the ``Workbench`` facade and the config editor widget.

Only the Jupyter server extension (``workbench.jupyter``, the layer above) imports this
package: the config editor, and ``discovery``, which the extension writes and kernels read.
pandas and ipywidgets are imported only when a DataFrame or a widget is asked for.
"""

from __future__ import annotations

from workbench.bench.trace_report import TraceReport
from workbench.notebook.config_editor import ConfigEditor
from workbench.notebook.workbench import Workbench

__all__ = ["ConfigEditor", "TraceReport", "Workbench"]
