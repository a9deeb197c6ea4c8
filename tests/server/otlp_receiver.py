"""A loopback OTLP/HTTP trace receiver for the opentelemetry trace tests.

Each ``POST /v1/traces`` is decoded into plain ``ReceivedSpan`` values: protobuf
(``ExportTraceServiceRequest`` from the ``opentelemetry-proto`` package), as the Python SDK
sends it, or OTLP JSON, as tritonserver 2.51's C++ exporter sends it (ids in hex there).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    #: "" for a span without a parent
    parent_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, int]]
    resource: dict[str, Any]
    scope: str

    @property
    def event_names(self) -> list[str]:
        return [name for name, _ in self.events]


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` serves on 127.0.0.1 until the block ends."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    def __enter__(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                content_type = self.headers.get("Content-Type", "")
                receiver._receive(self.path, content_type, body)
                self.send_response(200)
                self.send_header("Content-Type", content_type or "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def _receive(self, path: str, content_type: str, body: bytes) -> None:
        spans = list(_json_spans(body) if "json" in content_type else _proto_spans(body))
        self.paths.append(path)
        self.content_types.append(content_type)
        self.spans.extend(spans)

    def wait_for(self, count: int, timeout_s: float = 20.0) -> list[ReceivedSpan]:
        """The spans received once there are at least ``count`` of them."""
        deadline = time.monotonic() + timeout_s
        while len(self.spans) < count:
            assert time.monotonic() < deadline, f"{len(self.spans)} spans of {count} received"
            time.sleep(0.02)
        return list(self.spans)


# -- decoding ------------------------------------------------------------------------------------
def _proto_spans(body: bytes) -> Iterator[ReceivedSpan]:
    message = ExportTraceServiceRequest.FromString(body)
    for resource_spans in message.resource_spans:
        resource = {a.key: _proto_value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(),
                    kind=span.kind,
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    attributes={a.key: _proto_value(a.value) for a in span.attributes},
                    events=[(e.name, e.time_unix_nano) for e in span.events],
                    resource=resource,
                    scope=scope_spans.scope.name,
                )


def _proto_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def _json_spans(body: bytes) -> Iterator[ReceivedSpan]:
    for resource_spans in json.loads(body)["resourceSpans"]:
        attributes = resource_spans.get("resource", {}).get("attributes", [])
        resource = {a["key"]: _json_value(a["value"]) for a in attributes}
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                yield ReceivedSpan(
                    name=span["name"],
                    trace_id=span["traceId"],
                    span_id=span["spanId"],
                    parent_id=span.get("parentSpanId", ""),
                    kind=span.get("kind", 0),
                    start_ns=int(span["startTimeUnixNano"]),
                    end_ns=int(span["endTimeUnixNano"]),
                    attributes={
                        a["key"]: _json_value(a["value"]) for a in span.get("attributes", [])
                    },
                    events=[(e["name"], int(e["timeUnixNano"])) for e in span.get("events", [])],
                    resource=resource,
                    scope=scope_spans.get("scope", {}).get("name", ""),
                )


def _json_value(value: dict[str, Any]) -> Any:
    ((kind, raw),) = value.items()
    return int(raw) if kind == "intValue" else raw


# -- shape ---------------------------------------------------------------------------------------
def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    """The spans under ``parent``, by start time."""
    found = [s for s in spans if s.parent_id == parent.span_id and s.trace_id == parent.trace_id]
    return sorted(found, key=lambda s: (s.start_ns, s.name))


def tree(spans: list[ReceivedSpan], span: ReceivedSpan) -> dict[str, Any]:
    """A span and those under it as names, attributes and event names (no ids, no times),
    the children in name order (concurrent steps start in either order)."""
    below = sorted((tree(spans, child) for child in children(spans, span)), key=_order)
    shape: dict[str, Any] = {"name": span.name, "kind": span.kind, "events": span.event_names}
    if span.attributes:
        shape["attributes"] = span.attributes
    if below:
        shape["children"] = below
    return shape


def _order(shape: dict[str, Any]) -> tuple[str, str]:
    return shape["name"], json.dumps(shape.get("attributes", {}), sort_keys=True)


def roots(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    """The spans whose parent was not received (the ``InferRequest`` spans)."""
    ids = {(s.trace_id, s.span_id) for s in spans}
    return [s for s in spans if (s.trace_id, s.parent_id) not in ids]


__all__ = ["OtlpReceiver", "ReceivedSpan", "children", "roots", "tree"]
