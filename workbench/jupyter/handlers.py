"""The REST API under ``<base_url>/workbench/api/``: what the JupyterLab panel talks to.

Every method is ``@tornado.web.authenticated`` and ``@authorized`` (resource ``workbench``:
read for GET, write for POST and PUT), on Jupyter's ``APIHandler``: a request without a
token or login cookie gets 403 and no data, and a cookie-authenticated write without the
``_xsrf`` token is refused by Jupyter's XSRF check. Errors are JSON ``{"message": ...}`` with
the status of ``workbench.server.status`` (Triton's own status for the model server's
answers); a refused config also carries its ``problems``, each with its line.

| route | method | what |
| --- | --- | --- |
| ``status`` | GET | state, reason, engine, repository, endpoints, versions, log tail |
| ``server/start``, ``server/stop`` | POST | start (body ``{"model_repository": p}`` or none) |
| ``models`` | GET | ``{"models": [{name, version, state, reason}]}`` (the repository index) |
| ``models/<m>/load``, ``models/<m>/unload`` | POST | load (or reload) / unload ``m`` |
| ``models/<m>/config`` | GET, PUT | the file (text, JSON, history); write ``{"pbtxt": ...}`` |
| ``models/<m>/config/validate``, ``.../diff`` | POST | check / diff ``{"pbtxt": ...}`` |
| ``stats`` | GET | per model version: Triton's statistics and the recent samples (``?model=m``) |
| ``sweeps`` | GET, POST | each sweep's state and progress / start ``{"model": m, ...}`` |
| ``sweeps/<id>`` | GET | one sweep with its rows so far (``columns``, ``rows``) |
| ``sweeps/<id>/stop`` | POST | stop after the current measurement (rows kept) |

The sweep routes live in ``sweep_handlers.py``: a start takes ``bench.sweep``'s parameters
(``max_batch_size``, ``concurrency``, ``duration_s``, ...) and answers 409 while one runs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from workbench.errors import InvalidArgumentError, WorkbenchError
from workbench.jupyter.host import ServerHost
from workbench.jupyter.model_configs import InvalidConfigError, ModelConfigs
from workbench.server.status import http_status

#: the ``auth_resource`` every handler is authorized against
RESOURCE = "workbench"
_MODEL = r"(?P<name>[^/]+)"


class WorkbenchHandler(APIHandler):
    """Shared by the routes: the host, JSON replies, errors as JSON with their status."""

    auth_resource = RESOURCE

    @property
    def host(self) -> ServerHost:
        return self.settings["workbench_host"]

    @property
    def configs(self) -> ModelConfigs:
        return self.settings["workbench_configs"]

    async def respond(self, work: Awaitable[Any]) -> None:
        """Finish with ``await work`` as JSON, or with the error it raised."""
        try:
            data = await work
        except WorkbenchError as exc:
            self.fail(exc)
            return
        self.finish(json.dumps(data))

    def fail(self, exc: WorkbenchError) -> None:
        """Finish with ``{"message": ...}`` (and a refused config's ``problems``)."""
        self.set_status(_status(exc))
        body: dict[str, Any] = {"message": str(exc)}
        if isinstance(exc, InvalidConfigError):
            body["problems"] = exc.problems
        self.finish(json.dumps(body))

    def json_body(self) -> dict[str, Any]:
        if not self.request.body:
            return {}
        try:
            body = json.loads(self.request.body)
        except ValueError:
            raise InvalidArgumentError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise InvalidArgumentError("the request body must be a JSON object")
        return body

    def pbtxt(self) -> str:
        text = self.json_body().get("pbtxt")
        if not isinstance(text, str):
            raise InvalidArgumentError('the body must be {"pbtxt": "<config.pbtxt text>"}')
        return text


def _status(exc: WorkbenchError) -> int:
    """The status the error carries (the model server's reply, a sweep conflict's 409), else
    the one of its category."""
    return exc.status or http_status(exc)


class StatusHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.respond(self._status())

    async def _status(self) -> dict[str, Any]:
        return {**self.host.status(), "proxy_path": url_path_join(self.base_url, "workbench")}


class ServerHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def post(self, action: str) -> None:
        await self.respond(self._act(action))

    async def _act(self, action: str) -> dict[str, Any]:
        if action == "start":
            repository = self.json_body().get("model_repository")
            await self.host.start(str(repository) if repository else None)
        else:
            await self.host.stop()
        return self.host.status()


class ModelsHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.respond(self._models())

    async def _models(self) -> dict[str, Any]:
        index = await self.host.require_client().index()
        return {"models": [_model_row(entry) for entry in index]}


class ModelActionHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def post(self, name: str, action: str) -> None:
        await self.respond(self._act(name, action))

    async def _act(self, name: str, action: str) -> dict[str, Any]:
        client = self.host.require_client()
        await (client.load(name) if action == "load" else client.unload(name))
        rows = [_model_row(e) for e in await client.index() if e.get("name") == name]
        return {"name": name, "action": action, "models": rows}


class ConfigHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        await self.respond(self.configs.read(name))

    @web.authenticated
    @authorized
    async def put(self, name: str) -> None:
        await self.respond(self._write(name))

    async def _write(self, name: str) -> dict[str, Any]:
        return await self.configs.write(name, self.pbtxt())


class ConfigCheckHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def post(self, name: str, action: str) -> None:
        await self.respond(self._check(name, action))

    async def _check(self, name: str, action: str) -> dict[str, Any]:
        text = self.pbtxt()
        if action == "validate":
            return await self.configs.validate(name, text)
        return await self.configs.diff(name, text)


class StatsHandler(WorkbenchHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.respond(self._stats())

    async def _stats(self) -> dict[str, Any]:
        self.host.require_client()
        samples = self.host.sampler.as_json(self.get_arguments("model"))
        return {"interval_s": self.host.settings.stats_interval, **samples}


def _model_row(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": entry.get("name", ""),
        "version": entry.get("version", ""),
        "state": entry.get("state", ""),
        "reason": entry.get("reason", ""),
    }


def api_routes() -> list[tuple[str, type[WorkbenchHandler]]]:
    """URL patterns (under the base URL) and their handlers."""
    api = "workbench/api"
    return [
        (f"{api}/status", StatusHandler),
        (f"{api}/server/(?P<action>start|stop)", ServerHandler),
        (f"{api}/models", ModelsHandler),
        (f"{api}/models/{_MODEL}/(?P<action>load|unload)", ModelActionHandler),
        (f"{api}/models/{_MODEL}/config", ConfigHandler),
        (f"{api}/models/{_MODEL}/config/(?P<action>validate|diff)", ConfigCheckHandler),
        (f"{api}/stats", StatsHandler),
    ]


__all__ = ["RESOURCE", "WorkbenchHandler", "api_routes"]
