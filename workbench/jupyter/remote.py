"""``RemoteEngine``: the extension's third engine, a Triton server that already runs elsewhere.

``c.Workbench.engine = "http://gpu-box:8000"`` makes the extension drive that server with the
same routes, panel and sweeps, as ``Workbench.connect`` does in a kernel
(``workbench.notebook.remote`` says how, and what tritonserver 2.51 answers). It starts and
stops no process: ``start`` checks that the server is live and reads its version, ``stop``
forgets it, and the server keeps serving whoever else uses it. A config written through the
routes goes to the local repository copy first and then to the server as a load override;
sweeps load each point as an override of the model itself.

gRPC and metrics addresses are not guessed from the HTTP port, so the status lists neither
and the statistics samples have no p99 from the metrics endpoint.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os

from workbench.errors import UnavailableError
from workbench.jupyter.engines import TAIL_LINES, Endpoints
from workbench.jupyter.triton_client import TritonClient
from workbench.notebook.remote import server_address


class RemoteEngine:
    """Connects to the Triton server at ``url``; shaped as the ``Engine`` protocol."""

    def __init__(self, url: str, log: logging.Logger) -> None:
        self.url = url
        self.address = server_address(url)
        self.log = log
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._stopped = asyncio.Event()

    async def start(self, timeout_s: float) -> Endpoints:
        client = TritonClient(self.address)
        try:
            metadata = await asyncio.wait_for(client.server_metadata(), timeout_s)
        except asyncio.TimeoutError:
            raise UnavailableError(f"no Triton server answered at {self.url}") from None
        line = f"connected to {metadata.get('name', 'triton')} {metadata.get('version', '')}"
        self.tail.append(f"{line} at {self.url} (remote: not started or stopped here)")
        self.log.info("[workbench] %s", self.tail[-1])
        self._stopped.clear()
        host, _, port = self.address.rpartition(":")
        # No process of ours: the connection lives as long as this Jupyter server, whose pid
        # the discovery file then names (a kernel checks that it is alive).
        return Endpoints(int(port), 0, 0, os.getpid(), host=host)

    async def wait(self) -> int:
        """Until ``stop()``: a server that stops answering shows in each route's reply."""
        await self._stopped.wait()
        return 0

    async def stop(self) -> None:
        self._stopped.set()


__all__ = ["RemoteEngine"]
