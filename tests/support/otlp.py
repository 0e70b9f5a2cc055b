"""An OTLP/HTTP trace receiver of the tests' own: a loopback HTTP server decoding each POST /v1/traces body as
the protobuf `ExportTraceServiceRequest` (opentelemetry-proto), keeping every span it carried, flattened."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass
class Span:
    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_id: str
    start: int
    end: int
    attributes: dict[str, Any] = field(default_factory=dict)
    error: bool = False


def _value(any_value: Any) -> Any:
    which = any_value.WhichOneof("value")
    return getattr(any_value, which) if which else None


def decode(body: bytes) -> list[Span]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    Span(
                        service=str(resource.get("service.name", "")),
                        name=span.name,
                        kind=KINDS.get(span.kind, str(span.kind)),
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        start=span.start_time_unix_nano,
                        end=span.end_time_unix_nano,
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        error=span.status.code == 2,
                    )
                )
    return out


class Receiver:
    """The spans received so far (`spans`), and every body's bytes (`bodies`)."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()
        self.url = ""

    def named(self, name: str, service: str | None = None) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.name == name and (service is None or s.service == service)]

    def of_trace(self, trace_id: str) -> list[Span]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]


@contextlib.contextmanager
def receiver() -> Iterator[Receiver]:
    """A running receiver for a `with` block; its `url` is the traces endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)."""
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            spans = decode(body)
            with got.lock:
                got.bodies.append(body)
                got.spans.extend(spans)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with endpoint(Handler) as got.url:
        yield got


@contextlib.contextmanager
def endpoint(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` serving on a free loopback port (a thread per connection) for a `with` block: its traces URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def render(spans: list[Span]) -> str:
    """A trace as text: one line per span, indented under its parent, with its offset from the first span's
    start and its duration, in milliseconds (how the README shows an example trace)."""
    if not spans:
        return "(no spans)"
    ids = {s.span_id for s in spans}
    origin = min(s.start for s in spans)
    below: dict[str, list[Span]] = {}
    for span in spans:
        below.setdefault(span.parent_id if span.parent_id in ids else "", []).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in sorted(below.get(parent, []), key=lambda s: s.start):
            label = f"{'  ' * depth}{span.name} ({span.kind.lower()}, {span.service})"
            timing = f"+{(span.start - origin) / 1e6:7.2f} ms  {(span.end - span.start) / 1e6:7.2f} ms"
            lines.append(f"{label:<58} {timing}")
            walk(span.span_id, depth + 1)

    walk("", 0)
    return "\n".join(lines)
