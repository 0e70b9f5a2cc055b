"""OpenTelemetry traces of the gateway's and the relay's MCP requests (off unless MCPGATE_TRACING is true).

On, `setup` takes the SDK's sampler (OTEL_TRACES_SAMPLER[_ARG]), its resource (OTEL_RESOURCE_ATTRIBUTES,
OTEL_SERVICE_NAME) and its OTLP/HTTP exporter (OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT,
_COMPRESSION), and starts the batch export (observe/span_batches.py, OTEL_BSP_*; no after-fork hook, which a
gevent worker forking its children cannot have). The SDK is imported only then: off, `TRACER` stays None and
each hook in the request path is one None check (the `[otel]` extra need not even be installed).

A span is a small record (`Span`: ids from `random.getrandbits`, times from `time.time_ns`, its attributes a
plain dict set once), not the SDK's Span: the sampler decides once per request (every span of a request shares
its trace id, and a child follows its parent's decision), and the encoding to OTLP protobuf is done in the export
worker, per batch (observe/otlp_wire.py). The SDK's span machinery cost about 110 us per span on the request path,
its encoder about 90 us per span.

A request to an MCP endpoint gets a Trace, kept in the WSGI environ under KEY. Its SERVER span is opened once the
body is parsed (`request`), as a child of the W3C context in the HTTP `traceparent` header, else of the one in
the message's `params._meta.traceparent`, and dated back to the request's arrival; what ran before (the guard)
is recorded by `step` and written out then as its child spans. The span of the wait for the child (CLIENT,
named as the request) is what the child's request carries in `_meta.traceparent`; a forward to another
instance sends its own span's context in the `traceparent` header. Every span ends when the response is done
(an SSE stream: when it closes). Attributes follow the OpenTelemetry conventions for MCP (mcp.method.name,
jsonrpc.request.id, gen_ai.tool.name, mcp.session.id as the session's short id, error.type and
rpc.response.status_code for a JSON-RPC error); a request's arguments, its headers and any token are never
recorded.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from mcpgate.core import session_ids, wire
from mcpgate.core.jsonrpc import Message, Request

log = logging.getLogger("mcpgate.tracing")

KEY = "mcpgate.trace"  # the environ key of a request's Trace
TRACE_KEYS = ("traceparent", "tracestate")  # W3C Trace Context, in HTTP headers and in _meta alike
INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's span kinds
TRACER: Any = None  # the export (span_batches.SpanBatches) once `setup` switched tracing on; None: off
_api: Any = None  # opentelemetry.trace, imported with the SDK
_kinds: dict[int, Any] = {}  # OTLP's span kinds as the SDK's SpanKind (for the sampler)
_propagator: Any = None
_sampler: Any = None
_empty: Any = None  # an empty Context: no parent (None would make the sampler read the current one)
_HEADERS = tuple((key, f"HTTP_{key.upper()}") for key in TRACE_KEYS)
_bits = random.getrandbits


def setup(enabled: bool, service: str) -> None:
    """Switch tracing on for this process (a gateway worker, a relay): the SDK imported, its sampler, resource
    and exporter configured from OTEL_*; OTEL_SERVICE_NAME, when set, names the service instead of `service`."""
    global TRACER, _api, _propagator, _sampler, _empty
    if not enabled or TRACER is not None:
        return
    from opentelemetry import context, trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    import mcpgate
    from mcpgate.observe import otlp_wire
    from mcpgate.observe.span_batches import SpanBatches

    # the OTEL_* resource read directly: Resource.create runs its detectors in a thread pool, which a gevent
    # worker's patched threading does not survive
    name = os.environ.get("OTEL_SERVICE_NAME") or service
    resource = OTELResourceDetector().detect().merge(Resource({SERVICE_NAME: name}))
    head = otlp_wire.resource_head(resource.attributes, "mcpgate", mcpgate.__version__)
    _api, _propagator, _sampler = trace, TraceContextTextMapPropagator(), sampling._get_from_env_or_default()
    _empty = context.Context()
    _kinds.update({INTERNAL: trace.SpanKind.INTERNAL, SERVER: trace.SpanKind.SERVER, CLIENT: trace.SpanKind.CLIENT})
    TRACER = SpanBatches(OTLPSpanExporter(), head)
    atexit.register(TRACER.shutdown)
    log.info("tracing on: spans go to the OTLP/HTTP exporter the OTEL_* variables configure")


class Span:
    """A span's record: ended once (`end`), then queued for export when sampled."""

    __slots__ = (
        "attributes",
        "end",
        "error",
        "kind",
        "name",
        "parent_id",
        "remote_parent",
        "sampled",
        "span_id",
        "start",
        "state",
        "trace_id",
    )
    trace_id: int
    span_id: int
    parent_id: int
    remote_parent: bool
    state: str
    sampled: bool
    name: str
    kind: int
    attributes: dict[str, Any]
    start: int
    end: int
    error: bool

    def __init__(
        self, parent: Span, name: str, kind: int = INTERNAL, attributes: dict[str, Any] | None = None, start: int = 0
    ) -> None:
        """A child of `parent` (sampled, as its parent)."""
        self.trace_id, self.parent_id, self.remote_parent = parent.trace_id, parent.span_id, False
        self.span_id, self.state, self.sampled = _bits(64) or 1, parent.state, True
        self.name, self.kind, self.attributes = name, kind, attributes if attributes is not None else {}
        self.start, self.end, self.error = start or time.time_ns(), 0, False

    def finish(self, end: int = 0) -> None:
        self.end = end or time.time_ns()
        if self.sampled:
            TRACER.on_end(self)

    def traceparent(self) -> dict[str, str]:
        """Its context as W3C fields (traceparent, tracestate when there is one)."""
        carrier = {"traceparent": f"00-{self.trace_id:032x}-{self.span_id:016x}-{'01' if self.sampled else '00'}"}
        if self.state:
            carrier["tracestate"] = self.state
        return carrier


def root(parent: Any, name: str, kind: int, attributes: dict[str, Any], start: int = 0) -> Span:
    """A request's first span: the child of a W3C context (`extract`'s) or of none, sampled as the SDK's sampler
    (OTEL_TRACES_SAMPLER) decides; unsampled, it only carries the context on."""
    context = _api.get_current_span(parent).get_span_context() if parent is not None else None
    trace_id = context.trace_id if context is not None else _bits(128) or 1
    decision = _sampler.should_sample(parent or _empty, trace_id, name, _kinds[kind], attributes)
    span = Span.__new__(Span)
    span.trace_id, span.span_id, span.remote_parent = trace_id, _bits(64) or 1, context is not None
    span.parent_id = context.span_id if context is not None else 0
    span.sampled = decision.decision.is_sampled()
    span.state = decision.trace_state.to_header() if decision.trace_state else ""
    span.name, span.kind, span.attributes = name, kind, attributes
    span.start, span.end, span.error = start or time.time_ns(), 0, False
    return span


def extract(carrier: Mapping[str, Any] | None) -> Any:
    """The W3C context in a carrier (headers or _meta); None when it carries no valid one."""
    if not carrier or not isinstance(carrier.get("traceparent"), str):
        return None
    found = _propagator.extract({key: str(carrier[key]) for key in TRACE_KEYS if isinstance(carrier.get(key), str)})
    return found if _api.get_current_span(found).get_span_context().is_valid else None


def meta_of(message: Message | None) -> Mapping[str, Any] | None:
    params = getattr(message, "params", None)
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else None


def described(message: Request) -> tuple[str, dict[str, Any]]:
    """A request's span name and attributes (OpenTelemetry's MCP conventions; never its arguments)."""
    attributes: dict[str, Any] = {"mcp.method.name": message.method, "jsonrpc.request.id": str(message.id)}
    params = message.params if isinstance(message.params, dict) else {}
    target = params.get("name") if message.method in ("tools/call", "prompts/get") else None
    if not isinstance(target, str) or len(target) > 128:
        target = None
    if message.method == "tools/call":
        attributes["gen_ai.operation.name"] = "execute_tool"
        if target:
            attributes["gen_ai.tool.name"] = target
    elif target:
        attributes["gen_ai.prompt.name"] = target
    version = (meta_of(message) or {}).get(wire.META_PROTOCOL_VERSION)
    if isinstance(version, str) and len(version) <= 32:
        attributes["mcp.protocol.version"] = version
    return (f"{message.method} {target}" if target else message.method), attributes


def error_code(body: bytes) -> int | None:
    """The JSON-RPC error code of a (single) response body, if it is an error."""
    if b'"error"' not in body:
        return None
    try:
        decoded = json.loads(body)
    except ValueError:
        return None
    error = decoded.get("error") if isinstance(decoded, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else None


class Trace:
    """One request's spans: its SERVER span (opened by `request`, or at the end), the steps before it, the open
    child spans ended with it."""

    __slots__ = ("carrier", "open", "server", "span", "start", "steps")

    def __init__(self, environ: Mapping[str, Any]) -> None:
        self.start = time.time_ns()
        self.carrier = {key: environ[header] for key, header in _HEADERS if header in environ}
        self.span: Span | None = None
        self.server: str | None = None  # the published server's name
        self.steps: list[tuple[str, int, int]] = []  # steps before the span: name, start, end
        self.open: list[Span] = []  # child spans ending with the request

    def request(
        self, environ: Mapping[str, Any], message: Message | None, name: str, attributes: dict[str, Any]
    ) -> Span:
        """Open the SERVER span (once): parent from the traceparent header, else from the message's _meta."""
        if self.span is not None:
            return self.span
        parent = extract(self.carrier) or extract(meta_of(message))
        attributes = {**attributes, "network.transport": "tcp", "network.protocol.name": "http"}
        if self.server:
            attributes["mcpgate.server"] = self.server
        session = environ.get("HTTP_MCP_SESSION_ID")
        if isinstance(session, str) and session:
            attributes["mcp.session.id"] = session_ids.short(session)
        self.span = span = root(parent, name, SERVER, attributes, self.start)
        if span.sampled:  # not sampled: its context is passed on, no span is made below it
            for step, began, ended in self.steps:
                Span(span, step, start=began).finish(ended)
        self.steps.clear()
        return span

    def child(self, name: str, kind: int = INTERNAL, attributes: dict[str, Any] | None = None) -> Span:
        """A child span of the request's, ended with it (the request's own when it is not sampled)."""
        assert self.span is not None  # opened by `request` first
        if not self.span.sampled:
            return self.span
        span = Span(self.span, name, kind, attributes)
        self.open.append(span)
        return span

    def finish(self, environ: Mapping[str, Any], status: int, body: bytes | None) -> None:
        """End every span: the request's with its HTTP status and JSON-RPC error code (a whole body's)."""
        span = self.span or self.request(environ, None, str(environ.get("REQUEST_METHOD", "")), {})
        if not span.sampled:
            return
        for child in reversed(self.open):
            child.finish()
        self.open.clear()
        span.attributes["http.response.status_code"] = status
        code = error_code(body) if body else None
        if code is not None:
            span.attributes["error.type"] = span.attributes["rpc.response.status_code"] = str(code)
        span.error = code is not None or status >= 500
        span.finish()


def begin(environ: dict[str, Any], server: str) -> Trace:
    """The Trace of a request to an MCP endpoint (call only when TRACER is set)."""
    trace = environ[KEY] = Trace(environ)
    trace.server = server
    return trace


@contextlib.contextmanager
def _recorded(trace: Trace, name: str) -> Iterator[None]:
    if trace.span is not None and not trace.span.sampled:
        yield
        return
    if trace.span is not None:
        span = Span(trace.span, name)
        try:
            yield
        finally:
            span.finish()
        return
    began = time.time_ns()
    try:
        yield
    finally:
        trace.steps.append((name, began, time.time_ns()))


_NOTHING = contextlib.nullcontext()


def step(
    environ: Mapping[str, Any], name: str, message: Request | None = None
) -> contextlib.AbstractContextManager[Any]:
    """A child span for what runs inside (the guard, a session or pool lookup); "mcpgate.mrtr" instead for a
    `message` that is an MRTR round (a retry carrying requestState). Nothing when off."""
    trace = environ.get(KEY)
    if trace is None:
        return _NOTHING
    if message is not None and isinstance(message.params, dict) and message.params.get("requestState") is not None:
        name = "mcpgate.mrtr"
    return _recorded(trace, name)


def to_child(environ: Mapping[str, Any], message: Message) -> Message:
    """The request's SERVER span opened, and the message as the child gets it: a request's
    `_meta.traceparent` (and tracestate) naming the span of the wait for the child's answer."""
    trace: Trace | None = environ.get(KEY)
    if trace is None or not isinstance(message, Request):
        if trace is not None:
            trace.request(environ, message, getattr(message, "method", "batch"), {})
        return message
    name, attributes = described(message)
    trace.request(environ, message, name, attributes)
    span = trace.child(name, CLIENT, {**attributes, "network.transport": "pipe"})
    params = message.params if isinstance(message.params, dict) else {}
    if message.params is not None and not isinstance(message.params, dict):
        return message
    meta = {key: value for key, value in (meta_of(message) or {}).items() if key not in TRACE_KEYS}
    params = {**params, "_meta": {**meta, **span.traceparent()}}
    return dataclasses.replace(message, params=params, obj={**message.obj, "params": params}, raw=None)


def forwarding(environ: Mapping[str, Any], headers: list[tuple[str, str]], body: bytes, owner: str) -> None:
    """A forward to another instance: its span (CLIENT), whose context replaces the headers' traceparent."""
    trace: Trace | None = environ.get(KEY)
    if trace is None:
        return
    if trace.span is None:
        from mcpgate.core import jsonrpc

        message = jsonrpc.parse(body) if body else None
        if isinstance(message, Request):
            trace.request(environ, message, *described(message))
        else:
            trace.request(environ, message, str(environ.get("REQUEST_METHOD", "")), {})
    span = trace.child("mcpgate.forward", CLIENT, {"mcpgate.instance": owner})
    headers[:] = [(name, value) for name, value in headers if name.lower() not in TRACE_KEYS]
    headers.extend(span.traceparent().items())


class _Ending:
    """A streamed body whose close ends the request's spans."""

    def __init__(self, body: Iterable[bytes], end: Callable[[], None]) -> None:
        self.body, self.end = body, end

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.end()


def finish(
    environ: dict[str, Any], status: int, body: bytes | Iterable[bytes], sent: Iterable[bytes]
) -> Iterable[bytes]:
    """The response as the server sends it; the request's spans end now, or when a streamed body closes."""
    trace: Trace = environ.pop(KEY)
    if isinstance(body, bytes):
        trace.finish(environ, status, body)
        return sent
    return _Ending(sent, lambda: trace.finish(environ, status, None))


def relayed(body: bytes | None, headers: Mapping[str, str], send: Callable[[Mapping[str, str]], Any]) -> Any:
    """The relay's POST of a host's request upstream inside its span (CLIENT; child of the host's
    `_meta.traceparent` when it sent one), whose context goes in the `traceparent` header."""
    from mcpgate.core import jsonrpc

    message = jsonrpc.parse(body) if body else None
    if not isinstance(message, Request):
        return send(headers)
    name, attributes = described(message)
    attributes["network.transport"] = "tcp"
    span = root(extract(meta_of(message)), name, CLIENT, attributes)
    try:
        reply = send({**headers, **span.traceparent()})
    except BaseException:
        span.error = True
        span.finish()
        raise
    status = getattr(reply, "status_code", 0)
    span.attributes["http.response.status_code"] = status
    span.error = status >= 400
    span.finish()
    return reply
