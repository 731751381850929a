"""A local OpenTelemetry collector: OTLP/HTTP at /v1/traces, protobuf or JSON, kept in memory.

Requests are decoded with `opentelemetry-proto` (the messages the real exporters
encode), so what the test sees is what a real collector (Jaeger, the OpenTelemetry
Collector) would receive. tests/integration/test_tracing.py checks it against the
real OTLPSpanExporter before it trusts it with the API's and the worker's spans.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector received it; ids in lower-case hex ("" for no parent)."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    service: str
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    links: tuple[tuple[str, str], ...] = field(default=())


class OtlpCollector:
    """An OTLP/HTTP trace receiver on 127.0.0.1; `url` is an OTEL_EXPORTER_OTLP_ENDPOINT."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.requests = 0
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                collector._receive(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], *, timeout_s: float = 20.0) -> list[ReceivedSpan]:
        """The spans once `done(spans)` holds; AssertionError with what came if it never does."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done(list(self._spans)):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = sorted(f"{s.service}:{s.name}" for s in self._spans)
                    raise AssertionError(f"the collector has not received the spans expected; got {names}")
                self._changed.wait(remaining)
            return list(self._spans)

    # --- the receiver ------------------------------------------------------------------

    def _receive(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path.split("?")[0] != "/v1/traces":
            self._answer(handler, 404, "text/plain", b"only /v1/traces is served here")
            return
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        encoding = (handler.headers.get("Content-Encoding") or "").lower()
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        content_type = (handler.headers.get("Content-Type") or "").split(";")[0].strip()
        request = ExportTraceServiceRequest()
        try:
            if content_type == PROTOBUF:
                request.ParseFromString(body)
            elif content_type == JSON:
                request = _from_otlp_json(body)
            else:
                self._answer(handler, 415, "text/plain", f"unsupported {content_type!r}".encode())
                return
        except (ValueError, KeyError, json_format.ParseError) as exc:
            self._answer(handler, 400, "text/plain", str(exc).encode())
            return
        spans = list(_spans_of(request))
        with self._changed:
            self.requests += 1
            self._spans.extend(spans)
            self._changed.notify_all()
        response = ExportTraceServiceResponse()
        if content_type == PROTOBUF:
            self._answer(handler, 200, PROTOBUF, response.SerializeToString())
        else:
            self._answer(handler, 200, JSON, json_format.MessageToJson(response).encode())

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


def _from_otlp_json(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON: protobuf's JSON mapping, except that ids are hex, not base64."""
    data = json.loads(body)
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for item in (span, *span.get("links", [])):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if item.get(key):
                            item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
    return json_format.ParseDict(data, ExportTraceServiceRequest())


def _spans_of(request: ExportTraceServiceRequest) -> Iterator[ReceivedSpan]:
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        service = str(resource.get("service.name", ""))
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield ReceivedSpan(
                    trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_id=span.parent_span_id.hex(), name=span.name,
                    kind=KINDS.get(span.kind, str(span.kind)), service=service,
                    attributes={kv.key: _value(kv.value) for kv in span.attributes},
                    status=span.status.code,
                    links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                )


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None
