"""``WorkbenchExtension``: the Jupyter server extension's application.

Jupyter loads it through ``workbench._jupyter_server_extension_points()`` (enabled by the
``jupyter_server_config.d/workbench.json`` file the distribution installs). It reads the
``c.Workbench`` settings, adds the REST routes (sweeps included) and the proxy, starts the
model server once Jupyter's loop runs (``autostart``), and stops it (and a running sweep)
when Jupyter stops.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp

from workbench.jupyter.handlers import api_routes
from workbench.jupyter.host import ServerHost
from workbench.jupyter.model_configs import ModelConfigs
from workbench.jupyter.proxy import proxy_routes
from workbench.jupyter.settings import Workbench
from workbench.jupyter.sweep_handlers import sweep_routes
from workbench.jupyter.sweep_jobs import SweepJobs
from workbench.notebook import discovery


class WorkbenchExtension(ExtensionApp):
    """Triton Workbench in Jupyter: a shared model server, its REST API and an HTTP proxy."""

    name = "workbench"
    load_other_extensions = True

    def initialize_settings(self) -> None:
        assert self.serverapp is not None
        settings = Workbench(parent=self)
        discovery_file = discovery.discovery_path()
        host = ServerHost(
            settings,
            Path(self.serverapp.root_dir).expanduser(),
            self.serverapp.connection_url,
            self.log,
            discovery_file,
        )
        self.host = host
        configs = ModelConfigs(host)
        self.sweeps = SweepJobs(host, configs)
        self.settings.update(
            {"workbench_host": host, "workbench_configs": configs, "workbench_sweeps": self.sweeps}
        )
        # Kernels launched from here inherit it: Workbench.attach() finds this server first.
        os.environ[discovery.ENV_VAR] = str(discovery_file)

    def initialize_handlers(self) -> None:
        self.handlers.extend([*api_routes(), *sweep_routes(), *proxy_routes()])

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        if self.host.settings.autostart and (self.host.repository or self.host.remote):
            self.host.start_in_background()

    async def stop_extension(self) -> None:
        await self.sweeps.close()
        await self.host.stop()
        client = self.settings.get("workbench_proxy_client")
        if client is not None:
            client.close()


__all__ = ["WorkbenchExtension"]
