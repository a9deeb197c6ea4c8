"""``JupyterToken``: tritonclient through a Jupyter server's ``workbench/v2`` proxy.

Jupyter takes its token in an ``Authorization: token <token>`` header. tritonclient's HTTP
client lets a plugin add headers to every request, so one registration covers every call::

    client = tritonclient.http.InferenceServerClient("hub.example.org/user/me/workbench", ssl=True)
    client.register_plugin(JupyterToken(token))

(``headers={"Authorization": f"token {token}"}`` on each call does the same.) This module
imports nothing of Jupyter: it is for the machine the client runs on.
"""

from __future__ import annotations

from typing import Any

from tritonclient.http import InferenceServerClientPlugin


class JupyterToken(InferenceServerClientPlugin):
    """Sends ``Authorization: token <token>`` with every request of a tritonclient client."""

    def __init__(self, token: str) -> None:
        self.header = f"token {token}"

    def __call__(self, request: Any) -> None:
        request.headers["Authorization"] = self.header


__all__ = ["JupyterToken"]
