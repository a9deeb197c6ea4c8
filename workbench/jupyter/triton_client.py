"""The extension's link to the model server: Triton's HTTP API on tornado's async client.

The Jupyter server must never block its loop, so this is not ``tritonclient`` (blocking,
gevent) but tornado's ``AsyncHTTPClient`` on the same loop as the handlers. It uses only
Triton's public routes, so it works the same on the embedded server and on tritonserver.
A reply that is not 200 raises ``ServerReplyError`` with Triton's status and message.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from workbench.errors import UnavailableError, WorkbenchError

#: seconds for one call; loads may take minutes (a model's initialize)
TIMEOUT_S = 600.0


class ServerReplyError(WorkbenchError):
    """The model server answered with an error: Triton's status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class TritonClient:
    """Async calls to the server at ``address`` (``host:port``)."""

    def __init__(self, address: str) -> None:
        self.base = f"http://{address}"
        self._client = AsyncHTTPClient()

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        """``method`` ``path`` (JSON ``body``); the decoded JSON reply (None when empty)."""
        raw = await self.fetch(method, path, None if body is None else json.dumps(body).encode())
        return json.loads(raw) if raw else None

    async def fetch(self, method: str, path: str, body: bytes | None = None) -> bytes:
        request = HTTPRequest(
            self.base + path,
            method=method,
            body=body if body is not None else (b"" if method == "POST" else None),
            request_timeout=TIMEOUT_S,
        )
        try:
            response = await self._client.fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as exc:
            raise UnavailableError(f"the model server does not answer: {exc}") from None
        if response.code != 200:
            raise ServerReplyError(response.code, _error_text(response.body, response.code))
        return bytes(response.body or b"")

    # -- Triton's routes ---------------------------------------------------------------------
    async def server_metadata(self) -> dict[str, Any]:
        return dict(await self.call("GET", "/v2"))

    async def index(self) -> list[dict[str, Any]]:
        return list(await self.call("POST", "/v2/repository/index", {}))

    async def load(self, name: str, config: dict[str, Any] | None = None) -> None:
        """Load or reload ``name`` (``config``: Triton's JSON form, sent as the load's
        override); a failure carries the index's reason when Triton's own answer is the bare
        "failed to poll" text (as ``Workbench.load`` does)."""
        body = None if config is None else {"parameters": {"config": json.dumps(config)}}
        try:
            await self.call("POST", f"/v2/repository/models/{quote(name, safe='')}/load", body)
        except ServerReplyError as exc:
            reason, message = await self.reason(name), str(exc)
            if reason and reason not in message:
                raise ServerReplyError(exc.status or 500, f"{message.rstrip()}: {reason}") from None
            raise

    async def unload(self, name: str) -> None:
        await self.call("POST", f"/v2/repository/models/{quote(name, safe='')}/unload")

    async def statistics(self) -> list[dict[str, Any]]:
        data = await self.call("GET", "/v2/models/stats")
        return list(data.get("model_stats", [])) if data else []

    async def reason(self, name: str) -> str:
        """Why ``name`` is not serving, as the repository index says ("" when it gives none)."""
        reasons = [e.get("reason", "") for e in await self.index() if e.get("name") == name]
        return "; ".join(r for r in reasons if r)


async def fetch_text(url: str) -> str:
    """GET ``url`` (the metrics endpoint) as text; "" when it does not answer 200."""
    try:
        response = await AsyncHTTPClient().fetch(url, raise_error=False, request_timeout=10.0)
    except (OSError, HTTPClientError):
        return ""
    return response.body.decode(errors="replace") if response.code == 200 else ""


def _error_text(body: bytes | None, status: int) -> str:
    try:
        return str(json.loads(body or b"")["error"])
    except (ValueError, KeyError, TypeError):
        return (body or b"").decode(errors="replace") or f"HTTP {status}"


__all__ = ["ServerReplyError", "TritonClient", "fetch_text"]
