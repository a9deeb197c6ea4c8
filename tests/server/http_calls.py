"""HTTP calls the scheduling tests make: one infer, its output, several at once."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def infer(
    url: str, model: str, value: float, parameters: dict[str, Any] | None = None, rows: int = 1
) -> tuple[int, dict[str, Any]]:
    """POST one request; (status, body). ``rows`` > 0 sends a batch dimension."""
    shape = [rows, 1] if rows else [1]
    body: dict[str, Any] = {
        "inputs": [
            {"name": "INPUT0", "shape": shape, "datatype": "FP32", "data": [value] * max(rows, 1)}
        ]
    }
    if parameters:
        body["parameters"] = parameters
    request = urllib.request.Request(
        f"{url}/v2/models/{model}/infer", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def output(body: dict[str, Any], name: str) -> Any:
    return next(o["data"][0] for o in body["outputs"] if o["name"] == name)


def concurrently(calls: Sequence[Any]) -> list[Any]:
    """Run zero-argument callables at once; their results in order."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.result() for f in futures]
