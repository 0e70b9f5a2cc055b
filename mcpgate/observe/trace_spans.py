"""A request's Trace (observe/tracing.py) turned into its encoded OTLP spans, on the export's greenlet: the
request's own span (SERVER; the relay's: CLIENT), a span per step (INTERNAL), the wait for the child (CLIENT,
its id the one the child's `_meta.traceparent` named) and a forward to another instance (CLIENT). The ids the
request path did not need are drawn here; the attributes the request and its wait share are encoded once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mcpgate.core.jsonrpc import Request
from mcpgate.observe import otlp_wire, w3c

if TYPE_CHECKING:
    from mcpgate.observe.tracing import Trace

IDS = w3c.Ids()  # the export's own (a relay's export may run on a thread of its own)
_TCP = otlp_wire.attributes({"network.transport": "tcp"})
_HTTP = otlp_wire.attributes({"network.transport": "tcp", "network.protocol.name": "http"})
_PIPE = otlp_wire.attributes({"network.transport": "pipe"})


def encoded(trace: Trace) -> bytes:
    """Every span of an ended, sampled request."""
    from mcpgate.observe import tracing

    message = trace.message
    if isinstance(message, Request):
        name, described = tracing.described(message)
        common = otlp_wire.attributes(described)
    else:
        name = str(getattr(message, "method", "batch")) if message is not None else trace.http_method
        common = b""
    own = trace.span_id or IDS.take(8)
    extra: dict[str, Any] = {}
    if trace.kind == tracing.SERVER:
        if trace.server:
            extra["mcpgate.server"] = trace.server
        short = tracing.session_short(trace)
        if short is not None:
            extra["mcp.session.id"] = short
        error = trace.code is not None or trace.status >= 500
    else:
        error = trace.status == 0 or trace.status >= 400
    if trace.status:
        extra["http.response.status_code"] = trace.status
    if trace.code is not None:
        extra["error.type"] = extra["rpc.response.status_code"] = str(trace.code)
    base = _HTTP if trace.kind == tracing.SERVER else _TCP
    parent = trace.parent
    spans = [
        otlp_wire.span(
            trace.trace_id,
            own,
            parent.span_id if parent is not None else b"",
            trace.state,
            name,
            trace.kind,
            trace.start,
            trace.end_at,
            common + base + otlp_wire.attributes(extra),
            error,
            parent is not None,
        )
    ]
    spans += children(trace, own, name, common)
    return b"".join(spans)


def children(trace: Trace, own: bytes, name: str, common: bytes) -> list[bytes]:
    """The request's child spans: its steps, the wait for the child, a forward."""
    from mcpgate.observe.tracing import CLIENT, INTERNAL

    ids, state, end = trace.trace_id, trace.state, trace.end_at
    out = [
        otlp_wire.span(ids, IDS.take(8), own, state, step, INTERNAL, began, ended, b"", False, False)
        for step, began, ended in trace.steps
    ]
    if trace.wait is not None:
        span_id, began = trace.wait
        out.append(otlp_wire.span(ids, span_id, own, state, name, CLIENT, began, end, common + _PIPE, False, False))
    if trace.forward is not None:
        span_id, began, owner = trace.forward
        instance = otlp_wire.attributes({"mcpgate.instance": owner})
        forward = "mcpgate.forward"
        out.append(otlp_wire.span(ids, span_id, own, state, forward, CLIENT, began, end, instance, False, False))
    return out
