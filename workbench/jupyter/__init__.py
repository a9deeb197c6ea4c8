"""The Jupyter server extension: one model server per Jupyter server, its REST API under
``<base_url>/workbench/api/`` and its HTTP endpoint under ``<base_url>/workbench/v2/``.

``pip install triton-workbench`` enables it (``jupyter-config/jupyter_server_config.d``). The
extension app is ``workbench.jupyter.app.WorkbenchExtension``; its settings are
``c.Workbench.*`` (``workbench.jupyter.settings.Workbench``).

**Why the model server is a child process of the Jupyter server, not a thread in it.**
Both would be shared by every notebook and survive kernel restarts; they differ in what a
bad moment costs.

- *A crash.* onnxruntime, torch and tensorrt models execute on threads of the server
  process (only python models run in stub processes). A segfault, an abort or an
  out-of-memory kill there would take the Jupyter server down with it: every open notebook
  loses its kernels' connections and unsaved edits. As a child, the model server dies alone;
  the extension marks it ``failed`` with its last log lines and ``server/start`` brings it back.
- *The GIL, measured: not a reason.* In-process, the server's loop thread and Jupyter's
  tornado loop share one GIL. On the 2-core development VM, a tornado handler probed 400
  times at 100 Hz answered alike with the embedded server in a thread or in a child while
  perf_analyzer loaded it (python ``add`` model at c=4, ``linear_onnx`` at c=8): p50
  1.1-1.6 ms and p99 3.3-7.7 ms in both layouts, the spread being run-to-run noise. The
  server's loop mostly waits on sockets and stub processes, releasing the GIL.
- *Memory and imports.* Loading a torch or onnxruntime model imports those libraries into
  the process that serves it; in-process they would stay in the Jupyter server for good.
- *One shape for both engines.* ``engine="tritonserver"`` is a child process anyway; the
  extension talks to either through Triton's HTTP API only, as the notebook facade does.

The cost is one more process and its start (about a second before models load), and a
loopback hop for the REST routes, which the proxy would make in-process too. The child's
standard input is a pipe from Jupyter: when Jupyter exits, even killed, the child sees the
end of input, drains and exits, so no orphan keeps the ports.

``import workbench.jupyter`` imports nothing of jupyter_server; ``app.py`` does, when Jupyter
loads the extension. Kernels use ``workbench.notebook.discovery``.
"""

from __future__ import annotations

from typing import Any


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """The extension's application (``jpserver_extensions: {"workbench.jupyter": true}``
    works as well as the package's own ``{"workbench": true}``)."""
    from workbench.jupyter.app import WorkbenchExtension

    return [{"module": "workbench.jupyter", "app": WorkbenchExtension}]
