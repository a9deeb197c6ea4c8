"""``c.Workbench.*``: what the Jupyter server extension serves, and how.

Set in ``jupyter_server_config.py`` (or on the command line, ``--Workbench.autostart=False``).
The defaults suit a JupyterHub user: the repository is ``model_repository/`` under the
Jupyter root when it exists, every port is ephemeral and on 127.0.0.1, and the server starts
with Jupyter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Float, Integer, TraitError, Unicode, validate
from traitlets.config import Configurable

#: the folder under the Jupyter root that is served when no repository is configured
DEFAULT_REPOSITORY = "model_repository"
ENGINES = ("embedded", "tritonserver")


class Workbench(Configurable):
    """Settings of the Triton Workbench Jupyter server extension."""

    model_repository = Unicode(
        None,
        allow_none=True,
        help="The model repository to serve; a relative path is taken from the Jupyter root. "
        "Default: 'model_repository' under the Jupyter root when that folder exists, else "
        "none (the server does not start until one is given to POST .../server/start).",
    ).tag(config=True)
    http_port = Integer(0, help="HTTP port of the model server on 127.0.0.1 (0: ephemeral).").tag(
        config=True
    )
    grpc_port = Integer(0, help="gRPC port on 127.0.0.1 (0: ephemeral).").tag(config=True)
    metrics_port = Integer(0, help="Prometheus metrics port on 127.0.0.1 (0: ephemeral).").tag(
        config=True
    )
    autostart = Bool(
        True, help="Start the model server with Jupyter when there is a repository to serve."
    ).tag(config=True)
    engine = Unicode(
        "embedded",
        help="'embedded': Triton Workbench's own server; 'tritonserver': real Triton (found as "
        "WORKBENCH_TRITONSERVER, on PATH, in /opt/tritonserver or the nvidia-pytriton wheel); "
        "or the URL of a Triton server that already runs elsewhere, 'http://gpu-box:8000' "
        "(in explicit model-control mode): the extension connects to it and never starts or "
        "stops it, and model_repository is then your local copy, which config writes update "
        "before sending the new config with the load.",
    ).tag(config=True)
    tritonserver = Unicode(
        None, allow_none=True, help="Path of the tritonserver binary for engine='tritonserver'."
    ).tag(config=True)
    server_options = Dict(
        help="More keyword arguments of workbench.Server for the embedded engine, e.g. "
        "{'cache_size': 1048576, 'log_verbose': 1}."
    ).tag(config=True)
    startup_timeout = Float(300.0, help="Seconds to wait for every model to load at start.").tag(
        config=True
    )
    stats_interval = Float(1.0, help="Seconds between two statistics samples.").tag(config=True)
    stats_samples = Integer(300, help="Samples kept per model (a ring buffer).").tag(config=True)

    @validate("engine")
    def _valid_engine(self, proposal: dict[str, Any]) -> str:
        value = str(proposal["value"])
        if value in ENGINES:
            return value
        from workbench.errors import InvalidArgumentError
        from workbench.notebook.remote import server_address

        try:
            server_address(value)
        except InvalidArgumentError as exc:
            raise TraitError(f"c.Workbench.engine: {', '.join(ENGINES)} or {exc}") from None
        return value.strip().rstrip("/")

    @property
    def remote_url(self) -> str | None:
        """The URL of the remote server when ``engine`` is one, else None."""
        return None if self.engine in ENGINES else self.engine

    def repository_path(self, root_dir: Path, given: str | None = None) -> Path | None:
        """The repository to serve: ``given``, else the setting, else the default folder
        when it exists; relative paths are under ``root_dir``. None when there is none."""
        chosen = given or self.model_repository
        if chosen:
            return (root_dir / Path(chosen).expanduser()).resolve()
        default = root_dir / DEFAULT_REPOSITORY
        return default.resolve() if default.is_dir() else None


__all__ = ["DEFAULT_REPOSITORY", "ENGINES", "Workbench"]
