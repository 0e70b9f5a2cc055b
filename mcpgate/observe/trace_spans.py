"""A request's Trace (observe/tracing.py) turned into its encoded OTLP spans, on the export's greenlet: the
request's own span (SERVER; the relay's: CLIENT), a span per step (INTERNAL), the wait for the child (CLIENT,
its id the one the child's `_meta.traceparent` named) and a forward to another instance (CLIENT). The ids the
request path did not need are drawn here; the attributes the request and its wait share are encoded once.
"""

from __future__ import annotations

from typing import Any, Protocol

from mcpgate.core import session_ids
from mcpgate.observe import otlp_wire, w3c

INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's span kinds
IDS = w3c.Ids()  # the export's own (a relay's export may run on a thread of its own)
_PIPE = otlp_wire.attributes({"network.transport": "pipe"})
_ID_KEY = otlp_wire.field(1, b"jsonrpc.request.id")
_shapes: dict[tuple[Any, Any, Any], tuple[str, bytes]] = {}  # (method, name, version): span name, shared attributes
_owns: dict[tuple[Any, ...], bytes] = {}  # (kind, server, session, status, code, tool error): the request span's own


class Trace(Protocol):
    """What the export reads of a request's Trace (observe/tracing.py)."""

    what: tuple[str, Any, Any, Any] | str  # (method, params.name, protocol version, id), or the span's name
    http_method: str
    kind: int
    server: str | None
    session: str | None  # the Mcp-Session-Id it named
    trace_id: bytes
    span_id: bytes  # its own span's, when the request path needed it (b"": drawn here)
    parent: w3c.Parent | None
    state: str
    start: int
    end_at: int
    status: int
    code: int | None
    tool_error: bool
    steps: list[tuple[str, int, int]]
    wait: tuple[bytes, int] | None
    forward: tuple[bytes, int, str] | None


def encoded(trace: Trace) -> bytes:
    """Every span of an ended, sampled request."""
    name, common = shape(trace)
    ids = trace.span_id or IDS.take(8)
    if trace.kind == SERVER:
        error = trace.code is not None or trace.tool_error or trace.status >= 500
    else:
        error = not 0 < trace.status < 400
    parent = trace.parent
    spans = [
        otlp_wire.span(
            trace.trace_id,
            ids,
            parent.span_id if parent is not None else b"",
            trace.state,
            name,
            trace.kind,
            trace.start,
            trace.end_at,
            common + own_attributes(trace),
            error,
            parent is not None,
        )
    ]
    spans += children(trace, ids, name, common)
    return b"".join(spans)


def shape(trace: Trace) -> tuple[str, bytes]:
    """The request's span name and the attributes its span and the wait's share (described once per method, tool
    and version; the request id apart)."""
    what = trace.what
    if isinstance(what, str):
        return what or trace.http_method, b""
    method, target, version, request_id = what
    key = (method, target, version)
    try:
        found = _shapes.get(key)
    except TypeError:  # a name or version that is no string (unhashable)
        found = None
    if found is None:
        name, described = named(method, target, version)
        found = name, otlp_wire.attributes(described)
        if len(_shapes) < otlp_wire.CACHED and all(isinstance(part, str | None) for part in key):
            _shapes[key] = found
    return found[0], found[1] + id_attribute(str(request_id))


def id_attribute(value: str) -> bytes:
    """The jsonrpc.request.id attribute (a value per request: its KeyValue written around the key's bytes)."""
    encoded = value.encode()
    if len(encoded) > 100:  # a length past one varint byte somewhere: the general writer
        return otlp_wire.key_value(9, "jsonrpc.request.id", value)
    any_value = b"\x12" + bytes((len(encoded) + 2,)) + b"\x0a" + bytes((len(encoded),)) + encoded
    return b"\x4a" + bytes((len(_ID_KEY) + len(any_value),)) + _ID_KEY + any_value


def own_attributes(trace: Trace) -> bytes:
    """The request's own span's attributes beyond the shared ones: transport, server, session, status, error."""
    key = (trace.kind, trace.server, trace.session, trace.status, trace.code, trace.tool_error)
    found = _owns.get(key)
    if found is not None:
        return found
    extra: dict[str, Any] = {"network.transport": "tcp"}
    if trace.kind == SERVER:
        extra["network.protocol.name"] = "http"
        if trace.server:
            extra["mcpgate.server"] = trace.server
        if isinstance(trace.session, str) and trace.session:
            extra["mcp.session.id"] = session_ids.short(trace.session)
    if trace.status:
        extra["http.response.status_code"] = trace.status
    if trace.code is not None:
        extra["error.type"] = extra["rpc.response.status_code"] = str(trace.code)
    elif trace.tool_error:
        extra["error.type"] = "tool_error"  # OpenTelemetry's MCP conventions
    found = otlp_wire.attributes(extra)
    if len(_owns) < otlp_wire.CACHED:
        _owns[key] = found
    return found


def children(trace: Trace, own: bytes, name: str, common: bytes) -> list[bytes]:
    """The request's child spans: its steps, the wait for the child, a forward."""
    ids, state, end = trace.trace_id, trace.state, trace.end_at
    drawn = IDS.take(8 * len(trace.steps)) if trace.steps else b""
    out = [
        otlp_wire.span(ids, drawn[8 * n : 8 * n + 8], own, state, step, INTERNAL, began, ended, b"", False, False)
        for n, (step, began, ended) in enumerate(trace.steps)
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


def named(method: str, target: Any, version: Any) -> tuple[str, dict[str, Any]]:
    """The span name and attributes of a request of `method` naming `target` (a tool, a prompt), `version`."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    if method not in ("tools/call", "prompts/get") or not isinstance(target, str) or len(target) > 128:
        target = None
    if method == "tools/call":
        attributes["gen_ai.operation.name"] = "execute_tool"
        if target:
            attributes["gen_ai.tool.name"] = target
    elif target:
        attributes["gen_ai.prompt.name"] = target
    if isinstance(version, str) and len(version) <= 32:
        attributes["mcp.protocol.version"] = version
    return (f"{method} {target}" if target else method), attributes
