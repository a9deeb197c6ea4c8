"""``Workbench.connect``: drive a Triton server that runs elsewhere (a GPU box, a pod).

As in Model Analyzer's remote mode, nothing is started or stopped here and none of the
server's files are read or written: what serves changes only through Triton's repository
API, a new configuration as a load with a ``config`` override
(``POST /v2/repository/models/<m>/load`` with ``{"parameters": {"config": "<json>"}}``).
The user's local copy of the repository is where configurations come from: the editor checks
its drafts against it and ``apply()`` writes it before sending the override, sweeps start from
it, and ``promote()`` exports it. Nothing else writes it.

What tritonserver 2.51 answers, checked on loopback (``tests/notebook/test_remote.py``):

- loads and unloads need ``--model-control-mode=explicit``; in ``none`` and ``poll`` mode both
  answer 503 "explicit model load / unload is not allowed if polling is enabled";
- a load with an override serves it (``/config`` shows it, the index keeps the version READY),
  and a plain load afterwards keeps serving the override while the server's files are
  unchanged; an override that fails to load (or names another model) answers 500 "failed to
  poll from model repository" and the previous configuration keeps serving.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from workbench.errors import InvalidArgumentError, UnavailableError, UnsupportedError

#: what Triton answers a load or unload when it is not in explicit model-control mode
REFUSED_TEXT = "explicit model load / unload is not allowed"
#: seconds ``connect`` waits for the server to answer
CONNECT_TIMEOUT_S = 10.0


class ModelControlRefused(UnsupportedError):
    """The server refuses loads and unloads: it does not run in explicit model-control mode."""


def server_address(url: str) -> str:
    """``host:port`` of ``http://host:port`` (tritonclient's form); ``InvalidArgumentError``
    for anything else (https, a path, no port: Triton serves none of those itself)."""
    parts = urlsplit(url.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise InvalidArgumentError(
            f"expected the server's HTTP endpoint as http://HOST:PORT (e.g. "
            f"http://gpu-box:8000), got {url!r}"
        )
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}"


def refused_control(message: str, url: str) -> ModelControlRefused | None:
    """The error to raise when ``message`` is Triton refusing model control, else None."""
    if REFUSED_TEXT not in message:
        return None
    return ModelControlRefused(
        f"the server at {url} refuses to load and unload models ({message.strip()}): start "
        "tritonserver with --model-control-mode=explicit (and --load-model=* to load every "
        "model at start) so that the workbench can change what it serves"
    )


class RemoteServer:
    """A Triton server reached at ``url``, shaped like ``workbench.Server`` for the facade.

    It is not this process's: ``start()`` only checks that it answers and reads its version,
    ``stop()`` only forgets it. gRPC and metrics are not guessed from the HTTP port: give their
    addresses to use them (``grpc_url="host:8001"``)."""

    #: no in-process core: everything goes through Triton's HTTP API
    core = None

    def __init__(
        self, url: str, grpc_url: str | None = None, metrics_url: str | None = None
    ) -> None:
        self.http_address = server_address(url)
        self.grpc_url = grpc_url or ""
        self.metrics_url = metrics_url or ""
        self.version = ""
        self._connected = False

    @property
    def url(self) -> str:
        return f"http://{self.http_address}"

    @property
    def grpc_port(self) -> int:
        return _port(self.grpc_url)

    @property
    def metrics_port(self) -> int:
        return _port(self.metrics_url.removesuffix("/metrics"))

    @property
    def running(self) -> bool:
        """Connected (``start()`` found it live, ``stop()`` not called); not a health check."""
        return self._connected

    def start(self) -> RemoteServer:
        """Check that the server is live and read its metadata (``UnavailableError`` if not)."""
        metadata = _get_json(f"{self.url}/v2")
        self.version = str(metadata.get("version", ""))
        self._connected = True
        return self

    def stop(self) -> None:
        self._connected = False


def _port(address: str) -> int:
    port = address.rpartition(":")[2]
    return int(port) if port.isdigit() else 0


def _get_json(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S) as response:
            data = json.loads(response.read() or b"{}")
    except (OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise UnavailableError(f"no Triton server answers at {url}: {reason}") from None
    return data if isinstance(data, dict) else {}


__all__ = ["ModelControlRefused", "RemoteServer", "refused_control", "server_address"]
