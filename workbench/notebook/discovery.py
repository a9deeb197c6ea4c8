"""How a kernel finds the model server of the Jupyter server extension.

While its server runs, the extension keeps ``workbench-<jupyter pid>.json`` in the Jupyter
runtime dir (``jupyter --runtime-dir``, where Jupyter keeps its own ``jpserver-<pid>.json``),
with the server's URLs, and removes it when the server stops. It also puts that file's path
in the Jupyter server's environment as ``WORKBENCH_DISCOVERY_FILE``, which every kernel it
launches inherits. ``find_running()`` reads the files whose processes are alive, that
variable's file first, then the one of the kernel's parent Jupyter server.

This module imports neither jupyter_server nor tornado: kernels import it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from workbench._process import process_alive
from workbench.errors import NotFoundError, UnavailableError

#: the environment variable naming the discovery file of the Jupyter server that set it
ENV_VAR = "WORKBENCH_DISCOVERY_FILE"
PREFIX = "workbench-"


@dataclass(frozen=True)
class RunningServer:
    """A model server hosted by a Jupyter server extension, as its discovery file says."""

    path: Path
    jupyter_pid: int
    server_pid: int
    engine: str
    model_repository: str
    http_url: str
    http_address: str
    grpc_url: str | None
    metrics_url: str | None
    #: the Jupyter server (with its base URL) and the authenticated proxy to ``http_url``
    jupyter_url: str
    proxy_url: str
    started: str

    @classmethod
    def read(cls, path: Path) -> RunningServer | None:
        """The file's server, or None when the file is unreadable or its processes ended."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            names = {f.name for f in fields(cls)} - {"path"}
            server = cls(path=path, **{name: data[name] for name in names})
        except (OSError, ValueError, KeyError, TypeError):
            return None
        alive = process_alive(server.jupyter_pid) and process_alive(server.server_pid)
        return server if alive else None


class AttachedServer:
    """A running extension server seen from a kernel, shaped like ``workbench.Server`` for the
    ``Workbench`` facade (``Workbench.attach()``). It is the Jupyter server's, shared by every
    notebook: ``stop()`` only detaches this handle, and the server keeps serving."""

    #: no in-process core: everything goes through Triton's HTTP API
    core = None

    def __init__(self, found: RunningServer) -> None:
        self.found = found
        self._attached = True

    @property
    def http_address(self) -> str:
        return self.found.http_address

    @property
    def url(self) -> str:
        return self.found.http_url

    @property
    def grpc_url(self) -> str:
        return self.found.grpc_url or ""

    @property
    def grpc_port(self) -> int:
        return int(self.grpc_url.rpartition(":")[2] or 0)

    @property
    def metrics_url(self) -> str:
        return self.found.metrics_url or ""

    @property
    def metrics_port(self) -> int:
        return int(self.metrics_url.removesuffix("/metrics").rpartition(":")[2] or 0)

    @property
    def running(self) -> bool:
        """Attached, and the server its discovery file names still runs."""
        return self._attached and RunningServer.read(self.found.path) == self.found

    def start(self) -> AttachedServer:
        if not self.running:
            raise UnavailableError(
                f"the Jupyter server extension's server at {self.url} is not running any more; "
                "attach again (its panel or POST .../workbench/api/server/start starts it)"
            )
        return self

    def stop(self) -> None:
        self._attached = False


def runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def discovery_path(jupyter_pid: int | None = None, folder: Path | None = None) -> Path:
    """Where the Jupyter server ``jupyter_pid`` (this process) keeps its discovery file."""
    pid = os.getpid() if jupyter_pid is None else jupyter_pid
    return (folder or runtime_dir()) / f"{PREFIX}{pid}.json"


def write_discovery(path: Path, info: dict[str, Any]) -> None:
    """Write ``info`` atomically, readable by its owner only (like Jupyter's own files)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(info, file, indent=1)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove_discovery(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def find_running(folder: Path | None = None) -> list[RunningServer]:
    """The extension servers running on this machine for this user, most relevant first:
    the one named by ``WORKBENCH_DISCOVERY_FILE``, then the one of this process's parent
    (a kernel's Jupyter server), then the most recently started."""
    folder = folder or runtime_dir()
    found = [s for p in sorted(folder.glob(f"{PREFIX}*.json")) if (s := RunningServer.read(p))]
    named = os.environ.get(ENV_VAR, "")
    parent = os.getppid()

    found.sort(key=lambda server: server.started, reverse=True)
    # a stable sort: newest first within each rank
    return sorted(found, key=lambda s: (str(s.path) != named, s.jupyter_pid != parent))


def running_server(folder: Path | None = None) -> RunningServer:
    """The most relevant running server (``find_running()[0]``); ``NotFoundError`` saying
    where it looked when there is none."""
    found = find_running(folder)
    if not found:
        where = folder or runtime_dir()
        raise NotFoundError(
            f"no Triton Workbench server of a Jupyter server was found (no live {PREFIX}*.json "
            f"in {where}): the Jupyter server extension serves one when it is enabled "
            "('jupyter server extension list' shows workbench) and has a model repository "
            "(c.Workbench.model_repository, or model_repository/ under the Jupyter root)"
        )
    return found[0]


__all__ = [
    "ENV_VAR",
    "AttachedServer",
    "RunningServer",
    "discovery_path",
    "find_running",
    "remove_discovery",
    "running_server",
    "write_discovery",
]
