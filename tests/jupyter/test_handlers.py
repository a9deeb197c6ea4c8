"""The REST routes under ``<base_url>/workbench/api/`` against a real child server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.jupyter.conftest import wait_for
from workbench.jupyter.host import ServerHost

pytestmark = pytest.mark.integration


async def call(jp_fetch: Any, *path: str, method: str = "GET", body: Any = None) -> Any:
    """A JSON route's reply (raises ``HTTPClientError`` on an error status)."""
    data = None if body is None else json.dumps(body)
    if method in ("POST", "PUT") and data is None:
        data = ""
    response = await jp_fetch("workbench", "api", *path, method=method, body=data)
    return json.loads(response.body)


async def refused(jp_fetch: Any, *path: str, method: str = "GET", body: Any = None) -> Any:
    """The error reply: ``(status, JSON body)``."""
    with pytest.raises(HTTPClientError) as caught:
        await call(jp_fetch, *path, method=method, body=body)
    assert caught.value.response is not None
    return caught.value.code, json.loads(caught.value.response.body)


async def test_status_names_the_state_endpoints_and_versions(
    jp_fetch: Any, host: ServerHost, repository: Path
) -> None:
    status = await call(jp_fetch, "status")
    assert status["state"] == "running"
    assert status["engine"] == "embedded"
    assert status["model_repository"] == str(repository.resolve())
    assert status["endpoints"]["http_url"].startswith("http://127.0.0.1:")
    assert status["endpoints"]["grpc_url"].startswith("127.0.0.1:")
    assert status["endpoints"]["metrics_url"].endswith("/metrics")
    assert status["version"] and status["server_version"]
    assert status["proxy_path"] == "/user/alice/workbench"


async def test_models_lists_each_version_with_its_state_and_reason(
    jp_fetch: Any, host: ServerHost
) -> None:
    models = {m["name"]: m for m in (await call(jp_fetch, "models"))["models"]}
    assert set(models) == {"add", "echo", "broken"}
    assert models["add"]["state"] == "READY" and models["add"]["version"] == "1"
    assert models["broken"]["state"] == "UNAVAILABLE"
    assert "broken on purpose" in models["broken"]["reason"]


async def test_unload_then_load_changes_what_serves(jp_fetch: Any, host: ServerHost) -> None:
    unloaded = await call(jp_fetch, "models", "add", "unload", method="POST")
    assert unloaded["action"] == "unload"

    async def state() -> str:
        rows = (await call(jp_fetch, "models"))["models"]
        return next(m["state"] for m in rows if m["name"] == "add")

    for _ in range(100):
        if await state() == "UNAVAILABLE":
            break
    assert await state() == "UNAVAILABLE"
    loaded = await call(jp_fetch, "models", "add", "load", method="POST")
    assert [m["state"] for m in loaded["models"]] == ["READY"]


async def test_a_failed_load_answers_with_the_models_reason(
    jp_fetch: Any, host: ServerHost
) -> None:
    status, body = await refused(jp_fetch, "models", "broken", "load", method="POST")
    assert status in (400, 500)
    assert "broken on purpose" in body["message"]


async def test_config_reads_the_file_as_text_and_json(jp_fetch: Any, host: ServerHost) -> None:
    config = await call(jp_fetch, "models", "add", "config")
    assert config["pbtxt"].strip().startswith('name: "add"')
    assert config["config"]["max_batch_size"] == 8
    assert config["config"]["input"][0]["name"] == "INPUT0"
    assert config["problems"] == [] and config["history"] == []


async def test_validate_names_the_line_of_each_problem(jp_fetch: Any, host: ServerHost) -> None:
    text = (await call(jp_fetch, "models", "add", "config"))["pbtxt"]
    bad = text.replace("max_batch_size: 8", "max_batch_size: -3")
    result = await call(jp_fetch, "models", "add", "config", "validate", method="POST",
                        body={"pbtxt": bad})  # fmt: skip
    assert result["valid"] is False
    problem = result["problems"][0]
    assert problem["field"] == "max_batch_size"
    assert problem["line"] == _line_of(bad, "max_batch_size")
    unparsable = text.replace("max_batch_size: 8", "max_batch_size: [")
    result = await call(jp_fetch, "models", "add", "config", "validate", method="POST",
                        body={"pbtxt": unparsable})  # fmt: skip
    assert result["problems"][0]["line"] == _line_of(unparsable, "max_batch_size")
    good = await call(jp_fetch, "models", "add", "config", "validate", method="POST",
                      body={"pbtxt": text})  # fmt: skip
    assert good == {"valid": True, "problems": []}


async def test_an_invalid_config_is_refused_with_its_line_and_nothing_is_written(
    jp_fetch: Any, host: ServerHost, repository: Path
) -> None:
    path = repository / "add" / "config.pbtxt"
    before = path.read_bytes()
    bad = before.decode().replace("max_batch_size: 8", "max_batch_size: -3")
    status, body = await refused(jp_fetch, "models", "add", "config", method="PUT",
                                 body={"pbtxt": bad})  # fmt: skip
    assert status == 400
    assert f"line {_line_of(bad, 'max_batch_size')}: max_batch_size" in body["message"]
    assert body["problems"][0]["line"] == _line_of(bad, "max_batch_size")
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["1", "config.pbtxt"]


async def test_a_valid_config_is_diffed_written_and_reloaded(
    jp_fetch: Any, host: ServerHost, repository: Path
) -> None:
    path = repository / "add" / "config.pbtxt"
    text = path.read_text().replace("max_batch_size: 8", "max_batch_size: 4") + "# tuned\n"
    diff = await call(jp_fetch, "models", "add", "config", "diff", method="POST",
                      body={"pbtxt": text})  # fmt: skip
    assert "-max_batch_size: 8" in diff["diff"] and "+max_batch_size: 4" in diff["diff"]
    assert diff["problems"] == []
    written = await call(jp_fetch, "models", "add", "config", method="PUT", body={"pbtxt": text})
    assert written["applied"] is True and "reloaded" in written["status"]
    assert path.read_text() == text
    served = await jp_fetch("workbench", "v2", "models", "add", "config")
    assert json.loads(served.body)["max_batch_size"] == 4
    history = (await call(jp_fetch, "models", "add", "config"))["history"]
    assert len(history) == 1


async def test_stats_samples_throughput_and_latency_per_model(
    jp_fetch: Any, host: ServerHost
) -> None:
    request = {"inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                           "data": [1, 2, 3, 4]}]}  # fmt: skip
    for _ in range(5):
        await jp_fetch("workbench", "v2", "models", "add", "infer", method="POST",
                       body=json.dumps(request))  # fmt: skip

    def counted() -> bool:
        rows = host.sampler.as_json(["add"])["models"]
        return bool(rows) and rows[0]["statistics"]["inference_stats"]["success"]["count"] >= 5

    await wait_for(counted, 10.0)
    await wait_for(lambda: len(host.sampler.as_json(["add"])["models"][0]["samples"]) >= 2, 10.0)
    reply = await jp_fetch("workbench", "api", "stats", params={"model": "add"})
    stats = json.loads(reply.body)
    (row,) = stats["models"]
    assert row["name"] == "add" and row["version"] == "1"
    assert sum(s["success"] for s in row["samples"]) <= 5
    assert {"requests_per_s", "latency_us", "queue_us", "compute_us", "p99_us"} <= set(
        row["latest"]
    )


async def test_stop_and_start_the_server(jp_fetch: Any, host: ServerHost) -> None:
    stopped = await call(jp_fetch, "server", "stop", method="POST")
    assert stopped["state"] == "stopped" and stopped["endpoints"] is None
    assert not host.discovery_file.exists()
    status, body = await refused(jp_fetch, "models")
    assert status == 503 and "not running (stopped)" in body["message"]
    started = await call(jp_fetch, "server", "start", method="POST")
    assert started["state"] == "running"
    assert host.discovery_file.exists()


async def test_a_missing_repository_is_refused_at_start(jp_fetch: Any, host: ServerHost) -> None:
    await call(jp_fetch, "server", "stop", method="POST")
    status, body = await refused(jp_fetch, "server", "start", method="POST",
                                 body={"model_repository": "no_such_folder"})  # fmt: skip
    assert status == 404 and "no_such_folder" in body["message"]


def _line_of(text: str, field: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(field))


PICKY_MODEL = """
import json

import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        if "refuse" in json.loads(args["model_config"]).get("parameters", {}):
            raise RuntimeError("refused on purpose")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""


async def test_a_valid_config_that_does_not_load_is_rolled_back(
    jp_fetch: Any, host: ServerHost, repository: Path
) -> None:
    """The editor's rollback through the route: the file is put back, the model keeps
    serving its previous configuration, and the answer says why (503)."""
    from tests.jupyter.conftest import ECHO_CONFIG, write_model

    write_model(repository, "picky", ECHO_CONFIG.replace('"echo"', '"picky"'), PICKY_MODEL)
    await call(jp_fetch, "models", "picky", "load", method="POST")
    path = repository / "picky" / "config.pbtxt"
    before = path.read_bytes()
    text = before.decode() + 'parameters { key: "refuse" value: { string_value: "yes" } }\n'
    checked = await call(jp_fetch, "models", "picky", "config", "validate", method="POST",
                         body={"pbtxt": text})  # fmt: skip
    assert checked == {"valid": True, "problems": []}
    status, body = await refused(jp_fetch, "models", "picky", "config", method="PUT",
                                 body={"pbtxt": text})  # fmt: skip
    message = body["message"]
    assert status == 503 and "refused on purpose" in message
    assert "config.pbtxt was restored and the previous configuration keeps serving" in message
    assert path.read_bytes() == before
    assert (await call(jp_fetch, "models", "picky", "config"))["history"] == []
    served = json.loads((await jp_fetch("workbench", "v2", "models", "picky", "config")).body)
    assert "refuse" not in served.get("parameters", {})
    models = {m["name"]: m["state"] for m in (await call(jp_fetch, "models"))["models"]}
    assert models["picky"] == "READY"
