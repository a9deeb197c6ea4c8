"""``<base_url>/workbench/v2/...``: tritonclient through Jupyter's login, Triton's answers kept."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tritonclient.utils import InferenceServerException

from workbench.jupyter.host import ServerHost
from workbench.jupyter.token_auth import JupyterToken

pytestmark = pytest.mark.integration


@pytest.fixture
def proxy_address(http_server_client: Any, jp_base_url: str, host: ServerHost) -> str:
    """``host:port/<base_url>/workbench`` as tritonclient takes it (``http_server_client``
    is what makes the test's Jupyter server accept connections)."""
    return f"127.0.0.1:{http_server_client.get_http_port()}{jp_base_url}workbench"


async def test_tritonclient_infers_through_the_proxy_with_the_token_plugin(
    proxy_address: str, jp_serverapp: Any
) -> None:
    token = jp_serverapp.identity_provider.token

    def infer() -> np.ndarray:
        with httpclient.InferenceServerClient(proxy_address) as client:
            client.register_plugin(JupyterToken(token))
            # live, not ready: the broken model fails strict readiness, as in Triton
            assert client.is_server_live() and not client.is_server_ready()
            assert client.is_model_ready("add")
            tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
            tensor.set_data_from_numpy(np.ones((2, 4), np.float32), binary_data=True)
            wanted = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
            result = client.infer("add", [tensor], outputs=wanted)
            return result.as_numpy("OUTPUT0")

    # tritonclient blocks: it runs in a thread while this loop serves Jupyter
    output = await asyncio.to_thread(infer)
    np.testing.assert_array_equal(output, np.full((2, 4), 2.0, np.float32))


async def test_megabytes_pass_both_ways_with_a_token_header_per_call(
    proxy_address: str, jp_serverapp: Any
) -> None:
    headers = {"Authorization": f"token {jp_serverapp.identity_provider.token}"}
    data = np.arange(2_000_000, dtype=np.float32)  # 8 MB each way

    def echo() -> np.ndarray:
        with httpclient.InferenceServerClient(proxy_address) as client:
            tensor = httpclient.InferInput("IN", [data.size], "FP32")
            tensor.set_data_from_numpy(data, binary_data=True)
            wanted = [httpclient.InferRequestedOutput("OUT", binary_data=True)]
            return client.infer("echo", [tensor], outputs=wanted, headers=headers).as_numpy("OUT")

    np.testing.assert_array_equal(await asyncio.to_thread(echo), data)


async def test_tritonclient_without_the_token_is_refused(proxy_address: str) -> None:
    def metadata() -> Any:
        with httpclient.InferenceServerClient(proxy_address) as client:
            return client.get_model_metadata("add")

    with pytest.raises(InferenceServerException) as caught:
        await asyncio.to_thread(metadata)
    assert caught.value.status() == "403"


BINARY_REQUEST = (
    json.dumps(
        {
            "inputs": [{"name": "INPUT0", "shape": [1, 4], "datatype": "FP32",
                        "parameters": {"binary_data_size": 16}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
)  # fmt: skip

#: (method, path, body, extra headers): Triton's answers that the proxy must keep
EXCHANGES = [
    ("GET", "/v2/models/add/config", None, {}),
    ("GET", "/v2/models/nope", None, {}),
    ("POST", "/v2/models/nope/infer", b"{}", {}),
    ("POST", "/v2/models/add/infer", b"{not json", {}),
    ("GET", "/v2/models/broken/ready", None, {}),
    ("HEAD", "/v2/health/live", None, {}),
    (
        "POST",
        "/v2/models/add/infer",
        BINARY_REQUEST + np.ones(4, np.float32).tobytes(),
        {"Inference-Header-Content-Length": str(len(BINARY_REQUEST))},
    ),
]


@pytest.mark.parametrize(("method", "path", "body", "headers"), EXCHANGES)
async def test_the_proxy_answers_as_the_server_does(
    jp_fetch: Any,
    host: ServerHost,
    method: str,
    path: str,
    body: bytes | None,
    headers: dict[str, str],
) -> None:
    assert host.endpoints is not None
    direct = await AsyncHTTPClient().fetch(
        host.endpoints.url + path, method=method, body=body, headers=headers, raise_error=False
    )
    proxied = await jp_fetch(
        "workbench", *path.strip("/").split("/"), method=method, body=body, headers=headers,
        raise_error=False,
    )  # fmt: skip
    assert (proxied.code, proxied.body) == (direct.code, direct.body)
    for name in ("Content-Type", "Inference-Header-Content-Length"):
        assert _header(proxied, name) == _header(direct, name), name


def _header(response: HTTPResponse, name: str) -> str | None:
    return response.headers.get(name)
