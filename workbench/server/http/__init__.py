"""Triton's HTTP/REST protocol (KServe v2 plus Triton's extensions) as an ASGI application."""

from workbench.server.http.app import DEFAULT_MAX_INPUT_BYTES, HttpApp, create_app

__all__ = ["DEFAULT_MAX_INPUT_BYTES", "HttpApp", "create_app"]
