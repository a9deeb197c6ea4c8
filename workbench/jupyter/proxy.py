"""``<base_url>/workbench/v2/...``: the model server's HTTP API behind Jupyter's login.

The server itself listens on 127.0.0.1 only; a remote JupyterHub user reaches it through
this route with the Jupyter token, e.g. ``tritonclient.http.InferenceServerClient(
"hub.example.org/user/me/workbench", ssl=True)`` with ``JupyterToken(token)`` registered as
its plugin (``workbench.jupyter.token_auth``). Requests and replies are relayed whole (bodies
up to ``MAX_BODY_BYTES``), with Triton's status codes and the headers the protocol needs
(``Content-Type``, ``Content-Encoding``, ``Inference-Header-Content-Length`` for binary
tensors). The Jupyter token and cookies are not passed on. A ``generate_stream`` reply arrives
whole, once its stream ends. gRPC (HTTP/2) and the metrics port are not proxied.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from jupyter_server.auth.decorator import authorized
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from workbench.errors import UnavailableError, WorkbenchError
from workbench.jupyter.handlers import WorkbenchHandler

#: the largest request or reply relayed (Triton's default --http-max-input-size is 64 MiB)
MAX_BODY_BYTES = 256 * 1024 * 1024
#: seconds for one relayed request (an infer may queue behind a long batch)
TIMEOUT_S = 600.0
#: headers passed on, per direction
REQUEST_HEADERS = ("Content-Type", "Content-Encoding", "Accept-Encoding")
REPLY_HEADERS = ("Content-Type", "Content-Encoding")
BOTH_WAYS = ("Inference-Header-Content-Length",)


class ProxyHandler(WorkbenchHandler):
    """Relays GET, POST and HEAD under ``workbench/v2`` to the server's ``/v2``."""

    SUPPORTED_METHODS = ("GET", "POST", "HEAD")

    @web.authenticated
    @authorized
    async def get(self, path: str | None) -> None:
        await self._relay(path)

    @web.authenticated
    @authorized
    async def post(self, path: str | None) -> None:
        await self._relay(path)

    @web.authenticated
    @authorized
    async def head(self, path: str | None) -> None:
        await self._relay(path)

    async def _relay(self, path: str | None) -> None:
        try:
            code, headers, body = await self._forward(path or "")
        except WorkbenchError as exc:
            self.fail(exc)
            return
        self.set_status(code)
        for name, value in headers.items():
            self.set_header(name, value)
        self.finish(body, set_content_type=headers.get("Content-Type", "application/json"))

    async def _forward(self, path: str) -> tuple[int, dict[str, str], bytes]:
        # tornado unquoted the path; quote it again for the server
        url = f"{self.host.require_client().base}/v2{quote(path, safe='/')}"
        if self.request.query:
            url += f"?{self.request.query}"
        incoming = self.request.headers
        request = HTTPRequest(
            url,
            method=self.request.method or "GET",
            headers={k: incoming[k] for k in (*REQUEST_HEADERS, *BOTH_WAYS) if k in incoming},
            body=self.request.body if self.request.method == "POST" else None,
            request_timeout=TIMEOUT_S,
            decompress_response=False,
        )
        try:
            response = await _client(self.settings).fetch(request, raise_error=False)
        except (OSError, HTTPClientError) as exc:
            raise UnavailableError(f"the model server does not answer: {exc}") from None
        answer = response.headers
        kept = {k: answer[k] for k in (*REPLY_HEADERS, *BOTH_WAYS) if k in answer}
        return response.code, kept, response.body or b""


def _client(settings: dict[str, Any]) -> AsyncHTTPClient:
    """The proxy's own client: its body limits are not those of Jupyter's shared one."""
    client = settings.get("workbench_proxy_client")
    if client is None:
        client = AsyncHTTPClient(
            force_instance=True, max_body_size=MAX_BODY_BYTES, max_buffer_size=MAX_BODY_BYTES
        )
        settings["workbench_proxy_client"] = client
    return client


def proxy_routes() -> list[tuple[str, type[WorkbenchHandler]]]:
    return [("workbench/v2(?P<path>/.*)?", ProxyHandler)]


__all__ = ["MAX_BODY_BYTES", "ProxyHandler", "proxy_routes"]
