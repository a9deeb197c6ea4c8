"""The sweep routes under ``<base_url>/workbench/api/sweeps`` against a real child server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.jupyter.test_auth import status_of
from tests.jupyter.test_handlers import call, refused
from workbench.bench.scratch import SCRATCH_SUFFIX
from workbench.jupyter.host import ServerHost

pytestmark = pytest.mark.integration

TINY = {"duration_s": 0.3, "warmup_s": 0.05}


async def finished(jp_fetch: Any, sweep_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """The sweep's detail once it has ended, checking its progress on the way."""
    deadline = time.monotonic() + timeout_s
    while True:
        sweep = await call(jp_fetch, "sweeps", sweep_id)
        assert 0 <= sweep["done"] <= sweep["total"] and len(sweep["rows"]) == sweep["done"]
        if sweep["state"] not in ("running", "stopping"):
            return sweep
        assert time.monotonic() < deadline, sweep
        await asyncio.sleep(0.1)


async def test_a_sweep_starts_shows_its_progress_and_returns_its_rows(
    jp_fetch: Any, host: ServerHost, repository: Path
) -> None:
    body = {"model": "add", "max_batch_size": [2, 4], "concurrency": [1], **TINY}
    started = await call(jp_fetch, "sweeps", method="POST", body=body)
    assert started["model"] == "add" and started["total"] == 2 and started["id"]
    assert started["state"] in ("running", "done") and started["request"] == body
    listed = (await call(jp_fetch, "sweeps"))["sweeps"]
    assert [s["id"] for s in listed] == [started["id"]]
    sweep = await finished(jp_fetch, started["id"])
    assert sweep["state"] == "done" and sweep["done"] == 2 and sweep["error"] == ""
    rows = [dict(zip(sweep["columns"], row, strict=True)) for row in sweep["rows"]]
    assert [row["max_batch_size"] for row in rows] == [2, 4]
    assert all(row["throughput"] > 0 and row["p99_ms"] > 0 and row["error"] == "" for row in rows)
    assert not (repository / f"add{SCRATCH_SUFFIX}").exists()
    assert (await call(jp_fetch, "sweeps"))["sweeps"][0]["state"] == "done"


async def test_one_sweep_at_a_time_and_a_stopped_one_keeps_its_rows(
    jp_fetch: Any, host: ServerHost
) -> None:
    body = {"model": "add", "instance_count": [1, 2, 3], "concurrency": [1, 2], "duration_s": 1}
    started = await call(jp_fetch, "sweeps", method="POST", body=body)
    status, error = await refused(jp_fetch, "sweeps", method="POST", body={"model": "echo"})
    assert status == 409
    assert f"a sweep of 'add' is running (id {started['id']})" in error["message"]
    stopping = await call(jp_fetch, "sweeps", started["id"], "stop", method="POST")
    assert stopping["state"] in ("stopping", "stopped")
    sweep = await finished(jp_fetch, started["id"])
    assert sweep["state"] == "stopped" and sweep["done"] < sweep["total"] == 6
    assert len(sweep["rows"]) == sweep["done"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"model": "add", "max_batch_size": [-1]}, 400, "'max_batch_size': -1 is not an integer"),
        ({"model": "add", "max_batch_size": 2.5}, 400, "max_batch_size must be an integer or"),
        ({"model": "add", "concurrency": [0]}, 400, "concurrency 0 is not an integer >= 1"),
        ({"model": "add", "batch": [1]}, 400, "unknown sweep parameter(s) batch; use model,"),
        ({"model": "add", "protocol": "udp"}, 400, "protocol must be 'http' or 'grpc'"),
        ({"model": "add", "duration_s": "long"}, 400, "duration_s must be a number of seconds"),
        ({"max_batch_size": [1]}, 400, 'the body needs "model"'),
        ({"model": "nope"}, 404, "model 'nope' has no config.pbtxt"),
    ],
)
async def test_a_bad_request_is_refused_saying_why_and_starts_nothing(
    jp_fetch: Any, host: ServerHost, body: dict[str, Any], status: int, message: str
) -> None:
    code, error = await refused(jp_fetch, "sweeps", method="POST", body=body)
    assert (code, message) == (status, message) and message in error["message"]
    assert (await call(jp_fetch, "sweeps"))["sweeps"] == []


async def test_an_unknown_sweep_is_404(jp_fetch: Any, host: ServerHost) -> None:
    for method, path in [("GET", ("sweeps", "7")), ("POST", ("sweeps", "7", "stop"))]:
        code, error = await refused(jp_fetch, *path, method=method)
        assert code == 404 and "no sweep '7'" in error["message"]


async def test_sweeps_without_a_token_get_403(jp_fetch: Any, host: ServerHost) -> None:
    for method in ("GET", "POST"):
        code, body = await status_of(jp_fetch, method, "api/sweeps", {"Authorization": ""})
        assert code == 403 and b"sweeps" not in body
    assert (await call(jp_fetch, "sweeps"))["sweeps"] == []
