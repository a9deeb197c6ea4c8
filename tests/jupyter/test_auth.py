"""Jupyter's own authentication and XSRF protection guard every route and the proxy."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from workbench.jupyter.host import ServerHost

pytestmark = pytest.mark.integration

#: (method, path under workbench/) of every route
ROUTES = [
    ("GET", "api/status"),
    ("GET", "api/models"),
    ("POST", "api/models/add/load"),
    ("POST", "api/models/add/unload"),
    ("GET", "api/models/add/config"),
    ("PUT", "api/models/add/config"),
    ("POST", "api/models/add/config/validate"),
    ("POST", "api/models/add/config/diff"),
    ("GET", "api/stats"),
    ("GET", "api/sweeps"),
    ("POST", "api/sweeps"),
    ("GET", "api/sweeps/1"),
    ("POST", "api/sweeps/1/stop"),
    ("POST", "api/server/start"),
    ("POST", "api/server/stop"),
    ("GET", "v2/models/add/config"),
    ("POST", "v2/models/add/infer"),
    ("GET", "v2/health/ready"),
]


async def status_of(jp_fetch: Any, method: str, path: str, headers: dict[str, str]) -> tuple:
    body = '{"pbtxt": ""}' if method in ("POST", "PUT") else None
    try:
        response = await jp_fetch(
            "workbench", *path.split("/"), method=method, body=body, headers=headers,
            follow_redirects=False,
        )  # fmt: skip
    except HTTPClientError as exc:
        assert exc.response is not None
        return exc.code, exc.response.body
    return response.code, response.body


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_a_request_without_a_token_gets_403_and_no_data(
    jp_fetch: Any, host: ServerHost, method: str, path: str
) -> None:
    code, body = await status_of(jp_fetch, method, path, {"Authorization": ""})
    assert code == 403
    assert b"add" not in body and b"127.0.0.1" not in body and b"max_batch_size" not in body
    assert host.state == "running"  # stop was refused too


async def test_a_wrong_token_gets_403(jp_fetch: Any, host: ServerHost) -> None:
    code, _ = await status_of(jp_fetch, "GET", "api/models", {"Authorization": "token nope"})
    assert code == 403


async def login(jp_fetch: Any, token: str) -> dict[str, str]:
    """Log in with the token through Jupyter's login form: the session's cookies."""
    page = await jp_fetch("login", headers={"Authorization": ""})
    cookies = _cookies(page.headers.get_list("Set-Cookie"))
    form = urllib.parse.urlencode({"password": token, "_xsrf": cookies["_xsrf"]})
    with pytest.raises(HTTPClientError) as redirect:
        await jp_fetch(
            "login", method="POST", body=form, follow_redirects=False,
            headers={"Authorization": "", "Cookie": _header(cookies)},
        )  # fmt: skip
    assert redirect.value.code == 302 and redirect.value.response is not None
    cookies.update(_cookies(redirect.value.response.headers.get_list("Set-Cookie")))
    return cookies


async def test_cookie_writes_need_the_xsrf_token(
    jp_fetch: Any, jp_serverapp: Any, host: ServerHost
) -> None:
    cookies = await login(jp_fetch, jp_serverapp.identity_provider.token)
    session = {"Authorization": "", "Cookie": _header(cookies)}
    code, body = await status_of(jp_fetch, "GET", "api/models", session)
    assert code == 200 and b'"add"' in body  # the cookie alone reads
    for method, path in [("POST", "api/models/add/unload"), ("PUT", "api/models/add/config"),
                         ("POST", "api/server/stop"), ("POST", "v2/models/add/infer")]:  # fmt: skip
        code, body = await status_of(jp_fetch, method, path, session)
        assert code == 403 and b"_xsrf" in body, (method, path, body)
    assert host.state == "running"
    code, _ = await status_of(
        jp_fetch, "POST", "api/models/add/load", {**session, "X-XSRFToken": cookies["_xsrf"]}
    )
    assert code == 200


def _cookies(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        match = re.match(r"([^=]+)=([^;]*)", line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def _header(cookies: dict[str, str]) -> str:
    return "; ".join(f"{k}={v}" for k, v in cookies.items())
