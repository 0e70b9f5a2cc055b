"""OpenTelemetry traces of the gateway's and the relay's MCP requests (off unless MCPGATE_TRACING is true).

On, `setup` takes the SDK's sampler (OTEL_TRACES_SAMPLER[_ARG]) and starts the export: the worker batches ended
requests (OTEL_BSP_*) and writes each batch as a compact frame to a pipe (observe/span_pipe.py), read by a span
export process of its own (observe/span_export.py) that takes the resource (OTEL_RESOURCE_ATTRIBUTES,
OTEL_SERVICE_NAME), encodes OTLP and posts with the SDK's OTLP/HTTP exporter's settings
(OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION). No after-fork hook, which a gevent
worker forking its children cannot have. The SDK is imported only then: off, `TRACER` stays None and each hook in
the request path is one None check (the `[otel]` extra need not even be installed).

A request to an MCP endpoint gets a list, kept in the WSGI environ under KEY (`begin`; app.py makes it itself):
its start and server, then what the request path appends to it without a call: the guard's end, to_child's
tuple, each step's (name, start, end). The usual request (no traceparent header, params an object without a W3C
field, the sampler's rule for a request without a parent static, one step after to_child, a whole answer with no
error) stays that list: to_child splices the child's context, and adds the 24 bytes of ids (one draw from one
os.urandom per IDS_DRAWN bytes), the request's bytes as they came and the wait's start; `finish` adds its end,
status and session and queues the list as it is (as span_pipe.SpanPipe.on_end would); the export process reads
what the request asked (method, tool, protocol version, id) from its bytes. Any other request's list holds a Trace
(`traced`; observe/trace_record.py: plain fields and tuples, the steps read from the list at the end): the decision
once per request (the W3C context parsed here, observe/w3c.py; the SDK's sampler only when it is not a static or
parent-based static one: observe/trace_sampling.py); unsampled, only the context is passed on (nothing is
exported: the steps the request path appends without a check go with it). Sampled: the steps (the guard, the
session or pool lookup, an MRTR round: one at a time, the guard's starting at the request's start; their names
and a step's `with` block: observe/trace_steps.py), the id and start of the wait for the child (the span named in
the child's `_meta.traceparent`) and of a forward to another instance, the HTTP status. Either is written to the
export process (observe/span_records.py), where the other spans get their ids, the attributes are built and
encoded to OTLP protobuf (observe/trace_spans.py, otlp_wire.py), per batch.

The SERVER span is a child of the W3C context in the HTTP `traceparent` header, else of the one in the message's
`params._meta.traceparent`, and starts at the request's arrival. The wait for the child (CLIENT, named as the
request) is what the child's request carries in `_meta.traceparent`, put into the request's raw bytes (w3c.py);
a forward to another instance sends its own span's context in the `traceparent` header. Every span ends when
the response is done (an SSE stream: when it closes). Attributes follow the OpenTelemetry conventions for MCP
(mcp.method.name, jsonrpc.request.id, gen_ai.tool.name, mcp.session.id as the session's short id, error.type and
rpc.response.status_code for a JSON-RPC error, error.type "tool_error" for a tools/call result with isError true,
both read from a whole JSON answer); a request's arguments, its headers and any token are never
recorded.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mcpgate.core.jsonrpc import Message, Request
from mcpgate.observe import trace_sampling, w3c
from mcpgate.observe.trace_record import CLIENT as CLIENT  # OTLP's span kinds
from mcpgate.observe.trace_record import INTERNAL as INTERNAL
from mcpgate.observe.trace_record import SERVER, Trace
from mcpgate.observe.trace_record import decide as decide
from mcpgate.observe.trace_sampling import request_of, request_of_bytes
from mcpgate.observe.trace_steps import GUARD as GUARD  # the steps' names, as the request path names them
from mcpgate.observe.trace_steps import MRTR as MRTR
from mcpgate.observe.trace_steps import NOTHING, Nothing, Step, marks
from mcpgate.observe.trace_steps import POOL as POOL
from mcpgate.observe.trace_steps import SESSION as SESSION
from mcpgate.observe.trace_steps import step_name as step_name
from mcpgate.observe.trace_steps import steps_of as steps_of
from mcpgate.observe.w3c import TRACE_KEYS

log = logging.getLogger("mcpgate.tracing")

KEY = "mcpgate.trace"  # the environ key of a request's list
TRACER: Any = None  # the export (span_pipe.SpanPipe) once `setup` switched tracing on; None: off
IDS = w3c.Ids()
_rules: tuple[Any, Any, Any] = (True, True, False)  # the sampler for no parent, a sampled one, an unsampled one
_always: bool | None = None  # the decision whatever the parent (ALWAYS_ON, ALWAYS_OFF), known as a request begins
_root: bool | None = True  # the decision for a request without a parent when the sampler's is static, else None
_ABSENT: Any = object()  # to_child's params without "_meta"
_time = time.monotonic  # a span's times: the monotonic clock's seconds (a float packs at a fraction of an int's
now = time.monotonic  # cost), turned into the wall clock's nanoseconds by the export (observe/span_records.py)


def setup(enabled: bool, service: str) -> None:
    """Switch tracing on for this process (a gateway worker, a relay): the SDK's sampler configured from OTEL_*,
    the span export process started (its resource and exporter from OTEL_*; OTEL_SERVICE_NAME, when set, names the
    service instead of `service`)."""
    global TRACER, _rules, _always, _root, IDS
    if not enabled or TRACER is not None:
        return
    from mcpgate.observe.span_pipe import SpanPipe

    IDS = w3c.Ids()
    _rules = trace_sampling.configure()
    _always = _rules[0] if _rules[0] is _rules[1] is _rules[2] and isinstance(_rules[0], bool) else None
    _root = _rules[0] if isinstance(_rules[0], bool) else None
    TRACER = SpanPipe(service)
    atexit.register(TRACER.shutdown)
    proc = TRACER.export.proc
    log.info("tracing on: spans go by the export process (pid %s) to the endpoint OTEL_* name", proc and proc.pid)


def dropped() -> dict[str, int] | None:
    """The spans this process dropped, by reason (observe/span_pipe.py's DROPPED); None when tracing is off."""
    return None if TRACER is None else TRACER.dropped_by()


RAW_SENT = 2048  # a usual request's bytes up to this size go to the export process as they are (it reads them)


def begin(environ: dict[str, Any], server: str) -> list[Any]:
    """A request to an MCP endpoint's record (call only when TRACER is set): its list (app.py makes it itself)."""
    trace: list[Any] = [_time(), server]
    environ[KEY] = trace
    return trace


def traced(trace: list[Any], environ: Mapping[str, Any]) -> Trace:
    """The Trace a request's list holds (put in it on the first call: its start, its server, to_child's work on the
    usual request), for what the usual way does not serve. Its steps are the list's, read at the end (`steps_of`)."""
    child = None
    for item in trace:
        if type(item) is Trace:
            return item
        if type(item) is tuple and type(item[0]) is bytes:  # to_child's usual way: ids, the bytes, the wait's start
            child = item
    made = Trace(trace[1], SERVER, environ)
    made.start = trace[0]
    if child is not None:
        drawn, sent, waited = child
        made.opened = made.headed = made.decided = True
        made.sampled, made.trace_id = bool(_root), drawn  # (24 bytes: the trace id, then the wait's span id)
        if made.sampled:
            made.what = request_of_bytes(sent) if type(sent) is bytes else sent
            made.session = environ.get("HTTP_MCP_SESSION_ID")
            made.wait = (drawn, waited)
    trace.append(made)
    return made


def step(environ: Mapping[str, Any], name: str, message: Request | None = None) -> Step | Nothing:
    """A child span for what runs inside (the guard, a session or pool lookup; never one inside another), as a
    context manager (the request path appends its steps to the request's list itself instead): named by
    `step_name`. Nothing when off."""
    trace: list[Any] | None = environ.get(KEY)
    if trace is None:
        return NOTHING
    return Step(trace, step_name(name, message))


def to_child(environ: Mapping[str, Any], message: Message) -> Message:
    """The message as the child gets it: a request's `_meta.traceparent` naming the span of the wait for the
    child's answer (the message changed in place), the request's sampling decided. The usual request (params an
    object, its _meta absent or an object without a W3C field as a 2026-07-28 request's, no traceparent header,
    the sampler's rule for a request without a parent static) is served here in one call, its list given one
    tuple: the ids as IDS.context draws them (sliced here while the draw's `clean` part holds them: the trace id,
    then the wait's span id, one 24-byte value), the request's bytes as they came (the export process reads its
    method, tool, version and id from them; past RAW_SENT bytes, request_of's tuple instead) and the wait's start.
    The member is spliced into compact JSON's params here (one replace of `"params":{"` where the key is there
    once), else by w3c.spliced_member; an _meta there: the raw bytes dropped, as put_in_meta drops them. The rest
    goes by the list's Trace (`traced`, opened_to_child)."""
    trace: list[Any] | None = environ.get(KEY)
    if trace is None:
        return message
    if (
        type(message) is not Request
        or _root is None
        or len(trace) > 3
        or type(trace[-1]) is Trace  # (a forward's, say)
        or "HTTP_TRACEPARENT" in environ
    ):
        return opened_to_child(traced(trace, environ), environ, message)
    params = message.params
    if type(params) is not dict:
        return opened_to_child(traced(trace, environ), environ, message)
    meta = params.get("_meta", _ABSENT)  # a 2026-07-28 request's (its version, capabilities): served here too
    if meta is not _ABSENT and (type(meta) is not dict or "traceparent" in meta or "tracestate" in meta):
        return opened_to_child(traced(trace, environ), environ, message)  # ("_meta": null: put_in_meta's)
    ids = IDS
    at = ids.at
    if at + 24 <= ids.clean:  # no parent: a trace of its own (its id, then the wait's span id)
        drawn = ids.drawn[at : at + 24]
        ids.at = at + 24
    else:
        drawn = ids.context()
    context = f"00-{drawn.hex('-', -16)}-{'01' if _root else '00'}"  # the trace id's hex, "-", the span id's
    raw = message.raw
    if raw is not None and len(raw) <= RAW_SENT:
        trace.append((drawn, raw, _time()))
    else:
        trace.append((drawn, request_of(message, params, None if meta is _ABSENT else meta), _time()))
    if meta is not _ABSENT:  # put_in_meta's: its keys, then the traceparent; the raw bytes encoded again
        params["_meta"] = {**meta, "traceparent": context}
        message.raw = None
        return message
    params["_meta"] = {"traceparent": context}  # no tracestate
    if raw is not None:  # the key there once, no escape that could spell it otherwise (spliced_member's checks)
        if raw.count(b'"params"') != 1 or (92 in raw and raw.find(b"\\u") >= 0):  # (92: a backslash, as find's)
            message.raw = None
            return message
        spliced = raw.replace(b'"params":{"', f'"params":{{"_meta":{{"traceparent":"{context}"}},"'.encode(), 1)
        if len(spliced) != len(raw):  # compact JSON (a key right after the brace), else spliced_member's ways
            message.raw = spliced
        else:
            message.raw = w3c.spliced_member(raw, f'"_meta":{{"traceparent":"{context}"}}'.encode())
    return message


def opened_to_child(trace: Trace, environ: Mapping[str, Any], message: Message) -> Message:
    """to_child for any message: `open`, then the wait's context into the request's _meta (w3c.put_in_meta)."""
    trace.open(environ, message)
    if not isinstance(message, Request) or (message.params is not None and not isinstance(message.params, dict)):
        return message
    span_id = IDS.take(8)
    if trace.sampled:
        trace.wait = (span_id, _time())
    w3c.put_in_meta(message, trace.context(span_id))
    return message


def forwarding(environ: Mapping[str, Any], headers: list[tuple[str, str]], body: bytes, owner: str) -> None:
    """A forward to another instance: its span (CLIENT), whose context replaces the headers' traceparent."""
    listed: list[Any] | None = environ.get(KEY)
    if listed is None:
        return
    trace = traced(listed, environ)
    if not trace.opened:
        from mcpgate.core import jsonrpc

        trace.open(environ, jsonrpc.parse(body) if body else None)
    span_id = IDS.take(8)
    if trace.sampled:
        trace.forward = (span_id, _time(), owner)
    headers[:] = [(name, value) for name, value in headers if name.lower() not in TRACE_KEYS]
    headers.extend(trace.context(span_id).items())


def finish(
    environ: Mapping[str, Any],
    status: int,
    body: bytes | Iterable[bytes],
    sent: Iterable[bytes],
    trace: Trace | None = None,
) -> Iterable[bytes]:
    """The response as the server sends it; the request's spans end now, or when a streamed body closes (Trace.end,
    which gives `trace` where the environ holds no list): queued for export when sampled, as
    span_pipe.SpanPipe.on_end would queue it (one call for the request's end, not three). The usual request (its
    list: start, server, the guard's end, to_child's tuple, one step; a whole answer with no error) is queued as
    its list, its end, status and session added; any other, as its list's Trace (`traced`)."""
    record: list[Any] | Trace
    if trace is None:
        listed: list[Any] = environ.pop(KEY)  # type: ignore[attr-defined]
        if (
            len(listed) == 5
            and type(body) is bytes
            and type(listed[2]) is float
            and type(listed[4]) is tuple
            and type(listed[3]) is tuple
            and (not body or body[-17:] == b'"isError":false}}' or not marks(body))
        ):
            if not _root:
                return sent
            listed += (_time(), status, environ.get("HTTP_MCP_SESSION_ID"))
            record, spans = listed, 4  # the request's span, the guard's, the step's, the wait's
        else:
            record = traced(listed, environ)
            record.steps = steps_of(listed)
    else:
        record = trace
    if type(record) is Trace:  # (no closure here: a cell for each of its names would be made at every call)
        if type(body) is not bytes:
            return record.ending(environ, status, sent)
        spans = record.ended(environ, status, body)
        if not spans:
            return sent
    pipe = TRACER
    if pipe.stopped:
        return sent
    pipe.queue.append((record, spans))
    pipe.queued += spans
    if pipe.queued >= pipe.full_at:
        pipe.full()
    return sent


def relayed(body: bytes | None, headers: Mapping[str, str], send: Callable[[Mapping[str, str]], Any]) -> Any:
    """The relay's POST of a host's request upstream inside its span (CLIENT; child of the host's
    `_meta.traceparent` when it sent one), whose context goes in the `traceparent` header."""
    from mcpgate.core import jsonrpc

    message = jsonrpc.parse(body) if body else None
    if not isinstance(message, Request):
        return send(headers)
    trace = Trace(None, CLIENT)
    trace.open({}, message)
    trace.span_id = IDS.take(8)
    try:
        reply = send({**headers, **trace.context(trace.span_id)})
    except BaseException:
        trace.end({}, 0, None)
        raise
    trace.end({}, getattr(reply, "status_code", 0), None)
    return reply
